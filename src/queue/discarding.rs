//! What the queue lets go of without delivering it: a session's, a scope's, a document's or a
//! memory's spooled items discarded (with no delivery under way), dead letters retried, and the
//! counts made right after.

use super::*;

impl Queue {
    /// Puts dead letters back and delivers them now. Returns how many. Runs to the end on a
    /// task of its own: a client that hangs up once they are back in the queue does not leave
    /// them there uncounted and unflushed until some later flush or a restart.
    pub async fn retry_dead(&self) -> Result<u64, SpoolError> {
        let queue = self.clone();
        self.to_the_end(async move {
            let (requeued, n) = queue.inner.spool.requeue_dead().await?;
            let waiting = queue.inner.spool.waiting().await?;
            {
                let mut batcher = queue.inner.batcher.locked();
                for (s, n) in &waiting {
                    batcher.requeued(s, *n);
                }
            }
            for s in requeued {
                queue.inner.spawn_flush(s, Trigger::Explicit);
            }
            Ok(n)
        })
        .await
    }

    /// Drops what is spooled for a session (or all), e.g. on `clear`. Returns how many items.
    pub async fn discard(&self, session_id: Option<&str>) -> Result<u64, SpoolError> {
        let n = self.inner.spool.discard(session_id).await?;
        self.inner.batcher.locked().discarded(session_id);
        self.inner.outage_over_if_nothing_waits().await;
        Ok(n)
    }

    /// [`Queue::discard`], then `delete` (the backend's deletion), with no delivery running: the
    /// ones under way are waited for first, and none starts until `delete` is done. A delivery
    /// that finished after the deletion brought back memories the user had just cleared.
    /// Returns how many items were dropped and what `delete` returned.
    pub async fn discard_then<T>(
        &self,
        session_id: Option<&str>,
        delete: impl Future<Output = T>,
    ) -> Result<(u64, T), SpoolError> {
        self.with_no_delivery(self.discard(session_id), delete).await
    }

    /// As [`Queue::discard_then`], for what is queued for `scope` by any session (see
    /// [`crate::spool::Spool::discard_scope`]): another session of the same project, or a
    /// Hindsight-API client writing to its bank, had items queued that were delivered after the
    /// clear of the scope.
    pub async fn discard_scope_then<T>(
        &self,
        scope: &Scope,
        delete: impl Future<Output = T>,
    ) -> Result<(u64, T), SpoolError> {
        self.with_no_delivery(self.discard_scope(scope), delete).await
    }

    /// As [`Queue::discard_then`], for what is queued of one document of `bank` by any session
    /// (a forget of the document): a version of it still queued was stored again seconds after
    /// the forget.
    pub async fn discard_document_then<T>(
        &self,
        bank: &str,
        document_id: &str,
        delete: impl Future<Output = T>,
    ) -> Result<(u64, T), SpoolError> {
        self.with_no_delivery(self.recounted(self.inner.spool.discard_document(bank, document_id)), delete).await
    }

    /// As [`Queue::discard_then`], for the memory `id` queued or dead in any session (a forget
    /// of the memory). Its spool transaction first commits the removals of the batches delivered
    /// before it: left pending (a full disk failed their commit, a crash came first), a batch
    /// stayed spooled and a restart delivered it again, bringing the forgotten memory back.
    pub async fn discard_memory_then<T>(
        &self,
        bank: Option<&str>,
        id: &str,
        delete: impl Future<Output = T>,
    ) -> Result<(u64, T), SpoolError> {
        self.with_no_delivery(self.recounted(self.inner.spool.discard_memory(bank, id)), delete).await
    }

    /// Runs a spool discard, then sets the counts of the sessions it took items from again.
    async fn recounted(
        &self,
        discard: impl Future<Output = Result<(u64, Vec<String>), SpoolError>>,
    ) -> Result<u64, SpoolError> {
        let (n, sessions) = discard.await?;
        self.recount(&sessions).await?;
        self.inner.outage_over_if_nothing_waits().await;
        Ok(n)
    }

    /// Drops what is queued for `scope` by any session; what those sessions still hold (items
    /// of another scope) stays counted.
    async fn discard_scope(&self, scope: &Scope) -> Result<u64, SpoolError> {
        self.recounted(self.inner.spool.discard_scope(&scope.bank, &scope.tags)).await
    }

    /// The batcher's counts of `sessions` set again from the spool, after some of their items
    /// were dropped.
    async fn recount(&self, sessions: &[String]) -> Result<(), SpoolError> {
        let waiting = self.inner.spool.waiting().await?;
        let now = self.inner.clock.now();
        let mut batcher = self.inner.batcher.locked();
        for s in sessions {
            batcher.discarded(Some(s));
            if let Some(left) = waiting.get(s) {
                batcher.requeued(s, *left);
            }
            batcher.forget_if_idle(s, now); // no flush may come to drop it
        }
        Ok(())
    }

    /// Runs `discard`, then `delete`, with no delivery running (see [`Queue::discard_then`]).
    async fn with_no_delivery<T>(
        &self,
        discard: impl Future<Output = Result<u64, SpoolError>>,
        delete: impl Future<Output = T>,
    ) -> Result<(u64, T), SpoolError> {
        // Tokio's lock is fair: once a clear waits, flushes that start after it wait for it, and
        // those running stop after the batch they are delivering.
        let waiting = ClearWaiting::new(&self.inner.clears_waiting);
        let _no_delivery = self.inner.clearing.write().await;
        drop(waiting);
        let n = discard.await?;
        self.inner.metrics.items_discarded.fetch_add(n, Ordering::Relaxed);
        Ok((n, delete.await))
    }
}
