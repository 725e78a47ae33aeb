//! The vectors of the texts the embedding thread embedded lately, by their text.
//!
//! A document stored again replaces its passages: automatic retain stores a session's whole
//! transcript again every few turns, one turn longer, and the new passages hold the text of the
//! old ones but for the last. Their vectors left with the old rows, so every version was embedded
//! whole again: work quadratic in a session's length (billed tokens on a paid endpoint, both
//! cores for seconds with the built-in model), and the whole transcript without vectors until
//! then (review104 #2). Looked up here first, only the new text goes to the embedder.
//!
//! Kept for one embedder (the thread's): emptied when its vectors change length. Bounded in bytes;
//! the oldest entry leaves first.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// What the kept vectors may take, in bytes: ~2,700 vectors of 384 numbers (a session of a few
/// hundred passages many times over).
pub(crate) const RECENT_VECTOR_BYTES: usize = 4 << 20;

/// A text's key: two independent 64-bit hashes and its length (a collision would give a passage
/// another text's vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TextKey(u64, u64, usize);

impl TextKey {
    fn of(text: &str) -> Self {
        let hash = |salt: u8| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            salt.hash(&mut h);
            text.hash(&mut h);
            h.finish()
        };
        TextKey(hash(1), hash(2), text.len())
    }
}

/// Vectors by the text they were computed from, the oldest leaving first past a byte bound.
#[derive(Debug)]
pub(crate) struct RecentVectors {
    by_text: HashMap<TextKey, Vec<f32>>,
    order: VecDeque<TextKey>,
    bytes: usize,
    max_bytes: usize,
}

impl RecentVectors {
    /// Empty, keeping at most `max_bytes` of vectors.
    pub(crate) fn new(max_bytes: usize) -> Self {
        RecentVectors { by_text: HashMap::new(), order: VecDeque::new(), bytes: 0, max_bytes }
    }

    /// The vector computed from `text`, when it is kept.
    pub(crate) fn get(&self, text: &str) -> Option<&[f32]> {
        self.by_text.get(&TextKey::of(text)).map(Vec::as_slice)
    }

    /// Keeps `vector` as `text`'s, making room by dropping the oldest.
    pub(crate) fn put(&mut self, text: &str, vector: &[f32]) {
        let size = std::mem::size_of_val(vector);
        if size > self.max_bytes {
            return;
        }
        let key = TextKey::of(text);
        if let Some(old) = self.by_text.insert(key, vector.to_vec()) {
            // Kept already: its place in the order stays (it leaves when its first keeping does).
            self.bytes -= std::mem::size_of_val(old.as_slice());
            self.bytes += size;
            return;
        }
        self.order.push_back(key);
        self.bytes += size;
        while self.bytes > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(v) = self.by_text.remove(&oldest) {
                self.bytes -= std::mem::size_of_val(v.as_slice());
            }
        }
    }

    /// Forgets every vector (the embedder's vectors changed length).
    pub(crate) fn clear(&mut self) {
        self.by_text.clear();
        self.order.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::RecentVectors;

    #[test]
    fn a_text_kept_is_found_by_its_text_only() {
        let mut recent = RecentVectors::new(1024);
        recent.put("the first turn", &[1.0, 2.0]);
        assert_eq!(recent.get("the first turn"), Some(&[1.0, 2.0][..]));
        assert_eq!(recent.get("the first turn "), None);
        assert_eq!(recent.get("the second turn"), None);
        recent.clear();
        assert_eq!(recent.get("the first turn"), None);
    }

    #[test]
    fn the_oldest_leave_first_past_the_bound() {
        // Room for three vectors of two numbers.
        let mut recent = RecentVectors::new(3 * 8);
        for (i, text) in ["a", "b", "c", "d"].into_iter().enumerate() {
            recent.put(text, &[i as f32, 0.0]);
        }
        assert_eq!(recent.get("a"), None);
        for text in ["b", "c", "d"] {
            assert!(recent.get(text).is_some(), "{text}");
        }
        // Kept again, a text takes its new vector without growing the keeping.
        recent.put("b", &[9.0, 9.0]);
        assert_eq!(recent.get("b"), Some(&[9.0, 9.0][..]));
        assert!(recent.get("c").is_some() && recent.get("d").is_some());
        // A vector larger than the whole bound is not kept.
        recent.put("huge", &[0.0; 7]);
        assert_eq!(recent.get("huge"), None);
        assert!(recent.get("d").is_some());
    }
}
