//! How the embedding thread sizes its batches, and what it does with a batch the embedder
//! refused.

use mneme_embed::{EmbedError, Embedder};

use crate::store::Unembedded;

/// Passages embedded per call, at most.
pub(crate) const BATCH: usize = 32;
/// Batches in time before the batch may grow past the size that last timed out (see [`Sizing`]).
const GROW_AFTER: u32 = 64;

/// How many passages the embedding thread asks for at a time. A batch that times out is too
/// many for the endpoint's time (an endpoint slower than its timeout for 32 passages embedded
/// none of them, for good): the next is a single passage (which timing out too is an outage,
/// told at once, not after halving five times), then it doubles with each batch in time up to
/// half of what timed out; [`GROW_AFTER`] batches in time there, that ceiling doubles.
pub(crate) struct Sizing {
    pub(crate) batch: usize,
    pub(crate) ceiling: usize,
    in_time: u32,
}

impl Default for Sizing {
    fn default() -> Self {
        Self { batch: BATCH, ceiling: BATCH, in_time: 0 }
    }
}

impl Sizing {
    pub(crate) fn timed_out(&mut self, sent: usize) {
        *self = Self { batch: 1, ceiling: (sent / 2).max(1), in_time: 0 };
    }

    pub(crate) fn in_time(&mut self) {
        if self.batch < self.ceiling {
            self.batch = (self.batch * 2).min(self.ceiling);
        } else if self.ceiling < BATCH {
            self.in_time += 1;
            if self.in_time >= GROW_AFTER {
                (self.ceiling, self.in_time) = ((self.ceiling * 2).min(BATCH), 0);
                self.batch = self.ceiling;
            }
        }
    }
}

/// A batch the embedder refused, embedded a text at a time: one text it refuses (an endpoint's
/// input limit, say) is left out, with a warning, instead of holding up every later passage for
/// good. Refusing them all and a plain word too is the endpoint's fault, not the texts': `Err`,
/// retried as an outage. A text answered with a vector of the other length an unsettled
/// endpoint gives ([`EmbedError::Unsettled`]) is not refused: it is among those the answer
/// leaves [`Embedded::unsettled`], to be embedded again.
pub(crate) fn one_by_one(
    embedder: &dyn Embedder,
    batch: Vec<Unembedded>,
    reason: String,
) -> Result<Embedded, EmbedError> {
    let mut done = Embedded { passages: Vec::with_capacity(batch.len()), vectors: Vec::new(), unsettled: 0 };
    let mut refused = Vec::new();
    for passage in batch {
        match embedder.embed(&[passage.embedding_text()]).and_then(|v| check_dims(v, 1)) {
            Ok(mut v) => {
                done.vectors.push(v.remove(0));
                done.passages.push(passage);
            }
            Err(EmbedError::Invalid(why)) => refused.push((passage.pid, why)),
            Err(EmbedError::Unsettled(_)) => done.unsettled += 1,
            Err(unavailable) => return Err(unavailable),
        }
    }
    // Every text refused: the endpoint refuses everything (an outage), unless it embeds a plain
    // word, when these passages are what it refuses (a batch of one stopped semantic recall
    // for every question until another passage came).
    let all_refused = done.passages.is_empty() && done.unsettled == 0;
    if all_refused && embedder.embed(&["ping"]).and_then(|v| check_dims(v, 1)).is_err() {
        return Err(EmbedError::Invalid(reason));
    }
    for (pid, why) in refused {
        tracing::warn!(pid, "the embedder refuses this passage, which recall finds by its words only: {why}");
    }
    Ok(done)
}

/// What a batch gave: the passages embedded and their vectors, and how many were left for an
/// endpoint whose vectors' length is unsettled.
pub(crate) struct Embedded {
    pub(crate) passages: Vec<Unembedded>,
    pub(crate) vectors: Vec<Vec<f32>>,
    pub(crate) unsettled: usize,
}

pub(crate) fn check_dims(vectors: Vec<Vec<f32>>, n: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    if vectors.len() != n {
        return Err(EmbedError::Invalid(format!("{} vectors for {n} texts", vectors.len())));
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a timeout, one passage, then doubling up to half of what timed out; the ceiling
    /// doubles after [`GROW_AFTER`] batches in time there.
    #[test]
    fn a_timed_out_batch_starts_again_at_one_and_grows_back() {
        let mut s = Sizing::default();
        s.timed_out(32);
        let mut sizes = vec![s.batch];
        for _ in 0..4 {
            s.in_time();
            sizes.push(s.batch);
        }
        assert_eq!(sizes, [1, 2, 4, 8, 16]);
        for _ in 0..GROW_AFTER {
            s.in_time();
        }
        assert_eq!((s.batch, s.ceiling), (BATCH, BATCH));
        s.timed_out(1);
        assert_eq!((s.batch, s.ceiling), (1, 1));
    }
}
