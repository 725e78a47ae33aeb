//! The embedding thread: loads the model and the stored vectors, embeds what is not embedded yet
//! (backing off while the embedder is down, giving way to retains), re-embeds after a model
//! change, and measures the passages' neighbourhoods.

use super::*;

/// Runs the calling thread (and the threads it starts) only when no other thread wants the CPU
/// (SCHED_IDLE): vectors are background work, recall answers by BM25 without them.
pub(super) fn idle_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain syscall on the calling thread (pid 0), with a valid parameter.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            tracing::debug!("cannot make the embedding thread idle-priority: {}", std::io::Error::last_os_error());
        }
    }
}

impl Semantic {
    pub(super) fn run(
        self: &Arc<Self>,
        choice: EmbedderChoice,
        client: Option<Result<OpenAi, EmbedError>>,
        path: &std::path::Path,
        writer: &Writer,
    ) -> Result<(), String> {
        let embedder: Arc<dyn Embedder> = match (choice, client) {
            (_, Some(client)) => Arc::new(client.map_err(|e| e.to_string())?),
            (EmbedderChoice::Builtin, None) => {
                let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
                Arc::new(MiniLm::load(threads).map_err(|e| e.to_string())?)
            }
            (EmbedderChoice::OpenAi(config), None) => Arc::new(OpenAi::new(config).map_err(|e| e.to_string())?),
            (EmbedderChoice::Off, None) => return Ok(()),
        };
        let reader = Store::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        if let Err(e) = self.load_index(&reader, writer, embedder.dim()) {
            lock(&self.retagged_in_load).take(); // nothing will take them
            return Err(format!("cannot load the stored vectors: {e}"));
        }
        // An endpoint that tells its length by its answers takes the stored vectors' until
        // answers say otherwise: one odd first answer after a start set the length, and every
        // stored vector was dropped for it.
        let stored = read(&self.index).dim();
        if embedder.dim() == 0 && stored != 0 {
            embedder.expect_dim(stored);
        }
        *write(&self.embedder) = Some(embedder.clone());
        self.ready.store(true, Ordering::Release);
        tracing::debug!(model = %self.model, vectors = read(&self.index).len(), "semantic recall ready");
        let mut after = 0i64;
        let mut pause = RETRY_FIRST;
        let mut sizing = Sizing::default();
        // Passages passed over while the endpoint's length was unsettled: the pass starts again
        // from the first once it is through (they were embedded only after a restart).
        let mut unsettled_left = false;
        let mut recent = RecentVectors::new(RECENT_VECTOR_BYTES);
        loop {
            if let Some(from) = self.take_wake() {
                after = after.min(from - 1);
            }
            if lock(&self.wake).stop {
                return Ok(());
            }
            // An endpoint whose vectors changed length (another model served under the same
            // name, with `embedding_dim` unset) makes every stored vector incomparable: they are
            // computed again, as for a model change. Unnoticed, recall lost its dense side.
            let (now, was) = (embedder.dim(), read(&self.index).dim());
            if now != 0 && was != 0 && now != was {
                if let Err(e) = self.start_over(writer, now) {
                    self.back_off(format!("cannot drop the vectors of the old length: {e}"), &mut pause);
                    continue;
                }
                tracing::warn!(model = %self.model, "the embedder's vectors are now {now} long, the stored ones {was}: every passage is embedded again");
                recent.clear();
                after = 0;
            }
            // The store failing (its disk full, a busy file) is an outage like the embedder's:
            // retried with the same pauses, never the end of semantic recall until a restart.
            let batch = match reader.unembedded(&self.model, after, sizing.batch) {
                Ok(batch) => batch,
                Err(e) => {
                    self.back_off(format!("cannot read the passages to embed: {e}"), &mut pause);
                    continue;
                }
            };
            if batch.is_empty() && std::mem::take(&mut unsettled_left) {
                self.sleep(RETRY_FIRST);
                after = 0;
                continue;
            }
            if batch.is_empty() {
                let refused_question = std::mem::take(&mut lock(&self.wake).refused_question);
                let (down, slow, count) = {
                    let h = lock(&self.health);
                    let slow = h.query_wait.filter(|_| h.slow_queries.is_some());
                    (h.error.is_some(), slow, h.slow_count)
                };
                if refused_question || down || slow.is_some() {
                    // Nothing to embed, but recall's queries wait for a sign of life: an answer
                    // in the time a recall waits for one, to the latest question (questions
                    // asked meanwhile went without vectors, and a short one after a long one
                    // would be answered in time).
                    let latest = lock(&self.last_question).clone();
                    let asked = latest.filter(|_| slow.is_some()).unwrap_or_else(|| "ping".to_owned());
                    let started = Instant::now();
                    let answered = match embedder.embed(&[asked.as_str()]) {
                        // A question the endpoint refuses is answered by its words (as when it
                        // is asked at recall); whether the endpoint answers at all, a word says.
                        Err(EmbedError::Invalid(_)) if asked != "ping" => {
                            embedder.embed(&["ping"]).map(|_| Duration::ZERO)
                        }
                        other => other.map(|_| started.elapsed()),
                    };
                    match answered {
                        Ok(took) => {
                            // The next outage's first retry comes after the first pause again.
                            pause = RETRY_FIRST;
                            let mut h = lock(&self.health);
                            // (A question that took too long meanwhile is the last word.)
                            if h.slow_count == count {
                                h.slow_queries = slow.filter(|wait| took > *wait).map(|wait| {
                                    format!(
                                        "the embedder takes {} ms to embed a question, longer than the {} ms a recall waits",
                                        took.as_millis(),
                                        wait.as_millis()
                                    )
                                });
                            }
                            // Still slower than a recall waits: an outage that began within the
                            // quiet time of the last notice is told once it outlasts it, as one
                            // of an endpoint that is down is (review108 #3).
                            let tell = match h.slow_queries.clone() {
                                Some(reason) if self.outages.tell_now(&self.model, Instant::now()) => Some(reason),
                                _ => None,
                            };
                            drop(h);
                            if let Some(reason) = tell {
                                self.event(true, unavailable_notice(&reason));
                            }
                            self.available();
                        }
                        Err(e) => {
                            self.back_off(e.to_string(), &mut pause);
                            continue;
                        }
                    }
                }
                self.measure_neighbourhoods(writer);
                self.wait();
                continue;
            }
            self.defer_to_retains();
            let last = batch.last().map_or(after, |p| p.pid);
            // Texts embedded lately (the passages of a document stored again) are not sent again.
            let (mut known, mut known_vectors, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
            for p in batch {
                match recent.get(p.embedding_text()) {
                    Some(v) => {
                        known_vectors.push(v.to_vec());
                        known.push(p);
                    }
                    None => unknown.push(p),
                }
            }
            let batch = unknown;
            let sent = batch.len();
            let texts: Vec<&str> = batch.iter().map(Unembedded::embedding_text).collect();
            let embedded = match texts.is_empty() {
                true => Ok(Embedded { passages: batch, vectors: Vec::new(), unsettled: 0 }),
                false => match embedder.embed(&texts).and_then(|v| check_dims(v, batch.len())) {
                    Err(EmbedError::Invalid(reason) | EmbedError::Unsettled(reason)) => {
                        one_by_one(&*embedder, batch, reason)
                    }
                    other => other.map(|vectors| Embedded { passages: batch, vectors, unsettled: 0 }),
                },
            };
            // The endpoint's length became known with this very batch (its first answer since a
            // start) and differs from the stored vectors': the loop starts over above, and this
            // batch is embedded again with the rest (stored now, the index would refuse it and
            // the start-over keep it, so it would never be found).
            let index_dim = read(&self.index).dim();
            if let Ok(Embedded { vectors, .. }) = &embedded {
                if index_dim != 0 && vectors.first().is_some_and(|v| v.len() != index_dim) {
                    continue;
                }
            }
            let embedded = embedded.map(|mut done| {
                for (p, v) in done.passages.iter().zip(&done.vectors) {
                    recent.put(p.embedding_text(), v);
                }
                done.passages.extend(known);
                done.vectors.extend(known_vectors);
                done
            });
            match embedded {
                Ok(Embedded { passages, vectors, unsettled }) => match self.store(writer, passages, vectors) {
                    Ok(()) => {
                        unsettled_left |= unsettled > 0;
                        pause = RETRY_FIRST;
                        self.available();
                        after = last;
                        sizing.in_time();
                    }
                    Err(e) => self.back_off(format!("cannot store the vectors: {e}"), &mut pause),
                },
                // Too many texts for the endpoint's time: fewer, at once (not an outage).
                Err(EmbedError::TimedOut(why)) if sent > 1 => {
                    sizing.timed_out(sent);
                    tracing::debug!("{why}: embedding one passage, then up to {} at a time", sizing.ceiling);
                }
                Err(e) => self.back_off(e.to_string(), &mut pause),
            }
        }
    }

    /// An outage (the embedder's or the store's): told, then a pause that doubles up to
    /// [`RETRY_MAX`] while it lasts.
    fn back_off(&self, reason: String, pause: &mut Duration) {
        self.unavailable(reason);
        self.sleep(*pause);
        *pause = (*pause * 2).min(RETRY_MAX);
    }

    /// Drops every stored vector of the model not `dim` long, and empties the index for vectors
    /// of that length (on the writer: no write lands in between).
    fn start_over(self: &Arc<Self>, writer: &Writer, dim: usize) -> Result<(), String> {
        let (me, model) = (self.clone(), self.model.clone());
        writer
            .run(move |store| {
                store.drop_vectors_of_other_length(&model, dim).map_err(crate::error::sql_error)?;
                *write(&me.index) = VectorIndex::new(dim);
                Ok(())
            })
            .map_err(|e| e.to_string())
    }

    /// Loads every stored vector of the model into the index. Vectors of another length than
    /// the index's are deleted, to be computed again.
    fn load_index(self: &Arc<Self>, reader: &Store, writer: &Writer, dim: usize) -> Result<(), String> {
        *lock(&self.retagged_in_load) = Some(HashMap::new());
        let mut index = VectorIndex::new(dim);
        let mut refused = Vec::new();
        let mut after = 0;
        loop {
            let page = reader.vectors(&self.model, after, LOAD_PAGE).map_err(|e| e.to_string())?;
            let Some(last) = page.last() else { break };
            after = last.pid;
            for v in page {
                let pid = v.pid;
                let vector = mneme_embed::vector::Quantized { scale: v.scale, q: v.data };
                let label = Label { kind: v.kind, tags: v.tags };
                let new =
                    NewVector { pid, memory_seq: v.memory_seq, bank: v.bank, prev_pid: v.prev_pid, label, vector };
                if !index.add_loaded(new, v.crowding) {
                    refused.push(pid);
                }
            }
        }
        index.loaded();
        // The writer swaps it in after every write it has done so far, minus the passages
        // those deleted while the pages were read.
        let me = self.clone();
        writer
            .run(move |store| {
                let gone = store.missing_passages(&index.pids()).map_err(crate::error::sql_error)?;
                index.remove(&gone);
                if let Some(retagged) = lock(&me.retagged_in_load).take() {
                    index.retag(&retagged);
                }
                store.drop_vectors(&refused).map_err(crate::error::sql_error)?;
                *write(&me.index) = index;
                Ok(())
            })
            .map_err(|e| e.to_string())
    }

    /// Measures the neighbourhoods of every bank that has grown or shrunk by a quarter since
    /// they were last measured (see [`crate::neighbourhood`]). Runs on this thread, at its
    /// priority, deferring to retains between chunks and holding the index's read lock only to
    /// copy rows.
    fn measure_neighbourhoods(&self, writer: &Writer) {
        // Bound first: a guard in a `for` expression lives through the loop, and `install` writes.
        let banks = read(&self.index).unmeasured_banks();
        for b in banks {
            let Some(job) = read(&self.index).neighbourhood_job(b) else { continue };
            let mut measured = Vec::with_capacity(job.len());
            let mut from = 0;
            while from < job.len() {
                if lock(&self.wake).stop {
                    return;
                }
                // A chunk is ~20 ms of work at 4,096 reference passages: retains go first, as
                // they do before an embedding batch.
                self.defer_to_retains();
                let to = (from + MEASURE_ROWS).min(job.len());
                let Some(rows) = read(&self.index).rows(&job, from, to) else { break };
                job.measure(&rows, &mut measured);
                from = to;
            }
            if from < job.len() {
                continue;
            }
            if !write(&self.index).install(job, measured) {
                tracing::debug!(
                    bank = b,
                    "neighbourhoods measured on positions that moved since; measured again later"
                );
                continue;
            }
            // Kept with the vectors, so a restart does not measure the bank again.
            let measured = read(&self.index).crowding_of_bank(b);
            for chunk in measured.chunks(STORE_CROWDING_ROWS) {
                let (chunk, model) = (chunk.to_vec(), self.model.clone());
                if let Err(e) =
                    writer.run(move |store| store.put_crowding(&model, &chunk).map_err(crate::error::sql_error))
                {
                    tracing::warn!(bank = b, error = %e, "cannot store the measured neighbourhoods");
                    break;
                }
            }
        }
    }

    /// Stores a batch's vectors through the writer, which adds the stored ones to the index.
    fn store(self: &Arc<Self>, writer: &Writer, batch: Vec<Unembedded>, vectors: Vec<Vec<f32>>) -> Result<(), String> {
        let me = self.clone();
        let quantized: Vec<_> = vectors.iter().map(|v| quantize(v)).collect();
        // Measured here, against each bank's reference copied under the read lock and let go
        // (this thread runs only when nothing else wants the CPU: computed under the lock, a
        // busy machine held the writer and every recall behind it for seconds). The writer then
        // holds the write lock only to add. (A replaced passage's old vector may count as its
        // own neighbour; one of many.)
        let mut references: HashMap<&str, Option<crate::vectors::ReferenceCopy>> = HashMap::new();
        let crowding: Vec<Option<f32>> = batch
            .iter()
            .zip(&quantized)
            .map(|(p, q)| {
                let reference =
                    references.entry(p.bank.as_str()).or_insert_with(|| read(&self.index).reference_copy(&p.bank));
                reference.as_ref().and_then(|r| r.crowding_for(q))
            })
            .collect();
        drop(references);
        writer
            .run(move |store| {
                let rows: Vec<_> = batch
                    .iter()
                    .zip(&quantized)
                    .zip(&crowding)
                    .map(|((p, q), c)| NewStoredVector { passage: p, scale: q.scale, data: &q.q, crowding: *c })
                    .collect();
                let stored = store.put_vectors(&me.model, &rows).map_err(crate::error::sql_error)?;
                let mut index = write(&me.index);
                for (((p, q), tags), crowding) in batch.into_iter().zip(quantized).zip(stored).zip(crowding) {
                    if let Some(tags) = tags {
                        let v = NewVector {
                            pid: p.pid,
                            memory_seq: p.memory_seq,
                            bank: p.bank,
                            prev_pid: p.prev_pid,
                            label: Label { kind: p.kind, tags },
                            vector: q,
                        };
                        index.add_measured(v, crowding);
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    }

    /// Waits (at most [`MAX_DEFER`]) until retains have paused for [`QUIET`].
    pub(super) fn defer_to_retains(&self) {
        let started = Instant::now();
        while started.elapsed() < MAX_DEFER && !lock(&self.wake).stop {
            // Read, then let go, before sleeping: a guard in the `match` would be held through
            // the sleep, and the writer, which sets `last_write` after every write, would wait
            // for it (deliveries stalled 100 ms at a time, and the pause this waits for came
            // from that stall).
            let last_write = *lock(&self.last_write);
            match last_write {
                Some(t) if t.elapsed() < QUIET => self.sleep(QUIET - t.elapsed()),
                _ => return,
            }
        }
    }

    fn take_wake(&self) -> Option<i64> {
        lock(&self.wake).from.take()
    }

    /// Until new passages arrive, a query found the embedder failing, or the backend stops; at
    /// most [`LOOK_AGAIN`]: another process (`mneme migrate --to local` while the daemon runs)
    /// writes passages this one's writer never hears of.
    fn wait(&self) {
        let wake = lock(&self.wake);
        let (mut wake, _) = self
            .woken
            .wait_timeout_while(wake, LOOK_AGAIN, |w| w.from.is_none() && !w.probe && !w.refused_question && !w.stop)
            .unwrap_or_else(|p| p.into_inner());
        wake.probe = false;
    }

    /// For `pause`, or until the backend stops.
    fn sleep(&self, pause: Duration) {
        let wake = lock(&self.wake);
        if !wake.stop {
            let _ = self.woken.wait_timeout_while(wake, pause, |w| !w.stop);
        }
    }
}
