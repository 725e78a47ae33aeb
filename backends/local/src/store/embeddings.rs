//! The passages' vectors as the embedding thread reads and writes them: what is still to be
//! embedded, the vectors themselves and their crowding, and what a model change drops.

use super::*;

/// A passage whose vector is to be computed.
#[derive(Debug, Clone)]
pub struct Unembedded {
    pub pid: i64,
    pub memory_seq: i64,
    pub bank: String,
    /// Its memory's kind and encoded tags (what recall's filters look at).
    pub kind: String,
    pub tags: String,
    pub prev_pid: Option<i64>,
    pub text: String,
    /// The text of the passage before it in its memory (none for a memory's first).
    pub previous: Option<String>,
}

impl Unembedded {
    /// What the embedder is given: the passage without the opening it repeats from the one
    /// before it (see [`passages::own_text`]).
    pub fn embedding_text(&self) -> &str {
        passages::own_text(&self.text, self.previous.as_deref())
    }
}

/// A vector to store with [`Store::put_vectors`].
pub struct NewStoredVector<'a> {
    pub passage: &'a Unembedded,
    pub scale: f32,
    pub data: &'a [i8],
    /// How crowded its neighbourhood is, when its bank has been measured.
    pub crowding: Option<f32>,
}

/// A stored vector, as the index loads it.
#[derive(Debug, Clone)]
pub struct StoredVector {
    pub pid: i64,
    pub memory_seq: i64,
    pub bank: String,
    /// Its memory's kind and encoded tags (what recall's filters look at).
    pub kind: String,
    pub tags: String,
    pub prev_pid: Option<i64>,
    pub scale: f32,
    pub data: Vec<i8>,
    /// How crowded its neighbourhood was when last measured (`None`: not measured).
    pub crowding: Option<f32>,
}

impl Store {
    /// Up to `limit` passages after `after` without a vector of `model`, in pid order.
    pub fn unembedded(&self, model: &str, after: i64, limit: usize) -> rusqlite::Result<Vec<Unembedded>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT p.pid, m.bank, p.prev_pid, p.text, p.memory_seq, q.text, m.kind, m.tags
             FROM passages p CROSS JOIN memories m ON m.seq = p.memory_seq
             LEFT JOIN passages q ON q.pid = p.prev_pid AND q.memory_seq = p.memory_seq
             WHERE p.pid > ?1 AND NOT EXISTS (SELECT 1 FROM passage_vectors v WHERE v.pid = p.pid AND v.model = ?2)
             ORDER BY p.pid LIMIT ?3 + 0",
        )?;
        let rows = stmt.query_map(params![after, model, limit as i64], |r| {
            Ok(Unembedded {
                pid: r.get(0)?,
                bank: r.get(1)?,
                prev_pid: r.get(2)?,
                text: r.get(3)?,
                memory_seq: r.get(4)?,
                previous: r.get(5)?,
                kind: r.get(6)?,
                tags: r.get(7)?,
            })
        })?;
        rows.collect()
    }

    /// Stores vectors of `model` for passages that still hold the text they were computed from.
    /// Returns, for each stored, its memory's encoded tags as they are now (they may have
    /// changed since the passage was read); `None` for one not stored.
    pub fn put_vectors(&mut self, model: &str, vectors: &[NewStoredVector]) -> rusqlite::Result<Vec<Option<String>>> {
        let tx = self.conn.transaction()?;
        let mut stored = Vec::with_capacity(vectors.len());
        {
            let mut put = tx.prepare_cached(
                // Only onto the passage that was read: a passage deleted meanwhile whose pid a new
                // one took (SQLite reuses the highest) may hold the same text in another memory,
                // even another bank, and the index would file the vector under the old one's.
                "INSERT OR REPLACE INTO passage_vectors (pid, model, dim, scale, data, crowding)
                 SELECT ?1, ?2, length(?4), ?3, ?4, ?6 WHERE EXISTS (
                     SELECT 1 FROM passages p CROSS JOIN memories m ON m.seq = p.memory_seq
                     WHERE p.pid = ?1 AND p.text = ?5 AND p.memory_seq = ?7 AND m.bank = ?8)",
            )?;
            let mut tags = tx.prepare_cached(
                "SELECT m.tags FROM passages p CROSS JOIN memories m ON m.seq = p.memory_seq WHERE p.pid = ?1",
            )?;
            for v in vectors {
                let bytes: Vec<u8> = v.data.iter().map(|x| *x as u8).collect();
                let crowding = v.crowding.map(f64::from);
                let p = v.passage;
                let put = put.execute(params![
                    p.pid,
                    model,
                    f64::from(v.scale),
                    bytes,
                    p.text,
                    crowding,
                    p.memory_seq,
                    p.bank
                ])?;
                stored.push(if put == 1 { Some(tags.query_row([v.passage.pid], |r| r.get(0))?) } else { None });
            }
        }
        tx.commit()?;
        Ok(stored)
    }

    /// Records how crowded these passages' neighbourhoods were measured among `model`'s vectors,
    /// (pid, crowding); pids without a stored vector of that model are skipped.
    pub fn put_crowding(&mut self, model: &str, measured: &[(i64, f32)]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut put =
                tx.prepare_cached("UPDATE passage_vectors SET crowding = ?2 WHERE pid = ?1 AND model = ?3")?;
            for (pid, crowding) in measured {
                put.execute(params![pid, f64::from(*crowding), model])?;
            }
        }
        tx.commit()
    }

    /// Which of `pids` have no passage (any more).
    pub fn missing_passages(&self, pids: &[i64]) -> rusqlite::Result<Vec<i64>> {
        if pids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = pids.iter().map(i64::to_string).collect();
        let mut stmt =
            self.conn.prepare("SELECT value FROM json_each(?1) WHERE value NOT IN (SELECT pid FROM passages)")?;
        let rows = stmt.query_map([format!("[{}]", ids.join(","))], |r| r.get(0))?;
        rows.collect()
    }

    /// Deletes the vectors of `model` that are not `dim` long (to be computed again).
    pub fn drop_vectors_of_other_length(&mut self, model: &str, dim: usize) -> rusqlite::Result<usize> {
        self.conn.execute("DELETE FROM passage_vectors WHERE model = ?1 AND dim != ?2", params![model, dim as i64])
    }

    /// Deletes the vectors of these passages (to be computed again).
    pub fn drop_vectors(&mut self, pids: &[i64]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut drop = tx.prepare_cached("DELETE FROM passage_vectors WHERE pid = ?")?;
            for pid in pids {
                drop.execute([pid])?;
            }
        }
        tx.commit()
    }

    /// Every stored vector of `model`, a page at a time after pid `after`.
    pub fn vectors(&self, model: &str, after: i64, limit: usize) -> rusqlite::Result<Vec<StoredVector>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT v.pid, m.bank, p.prev_pid, v.scale, v.data, p.memory_seq, v.crowding, m.kind, m.tags FROM passage_vectors v
             CROSS JOIN passages p ON p.pid = v.pid CROSS JOIN memories m ON m.seq = p.memory_seq
             WHERE v.pid > ?1 AND v.model = ?2 ORDER BY v.pid LIMIT ?3 + 0",
        )?;
        let rows = stmt.query_map(params![after, model, limit as i64], |r| {
            let bytes: Vec<u8> = r.get(4)?;
            Ok(StoredVector {
                pid: r.get(0)?,
                bank: r.get(1)?,
                prev_pid: r.get(2)?,
                memory_seq: r.get(5)?,
                scale: r.get::<_, f64>(3)? as f32,
                data: bytes.into_iter().map(|b| b as i8).collect(),
                crowding: r.get::<_, Option<f64>>(6)?.map(|c| c as f32),
                kind: r.get(7)?,
                tags: r.get(8)?,
            })
        })?;
        rows.collect()
    }
}
