//! A bank's profile as Hindsight shows and edits it (`GET`/`PUT`/`PATCH …/banks/{bank}`,
//! `GET …/banks`), and the bank's retains delivered before its mission changes.

use super::*;

const BANK_RECORD: &str = "hindsight_bank";

impl HindsightApi {
    /// Creates or updates a bank's profile (`PUT` and `PATCH`).
    pub async fn update_bank(
        &self,
        bank: &str,
        update: BankUpdate,
        write: BankWrite,
    ) -> Result<BankProfile, CompatError> {
        check_bank(bank)?;
        let mut profile = self.bank(bank).await?;
        let settings = self.settings();
        let keep = |v: Option<String>| v.and_then(|v| crate::session::clean_text(&settings, &v));
        let mission_given = update.mission.is_some() || update.background.is_some();
        let disposition_given = update.disposition.is_some()
            || update.disposition_skepticism.is_some()
            || update.disposition_literalism.is_some()
            || update.disposition_empathy.is_some();
        if let Some(name) = keep(update.name) {
            profile.name = name;
        }
        // Hindsight 1.1 keeps one text under both names: setting either sets both, and given
        // both, `mission` wins, as on the server (the last given won: review111 #1).
        if let Some(text) = keep(update.mission).or_else(|| keep(update.background)) {
            profile.mission = text.clone();
            profile.background = Some(text);
        }
        if let Some(d) = update.disposition {
            if [d.skepticism, d.literalism, d.empathy].iter().any(|v| !(1..=5).contains(v)) {
                return Err(CompatError::Invalid("disposition traits must be between 1 and 5".into()));
            }
            profile.disposition = d;
        }
        // The flat form, each trait on its own, as Hindsight 1.1 still takes it.
        let d = &mut profile.disposition;
        for (name, value, slot) in [
            ("disposition_skepticism", update.disposition_skepticism, &mut d.skepticism),
            ("disposition_literalism", update.disposition_literalism, &mut d.literalism),
            ("disposition_empathy", update.disposition_empathy, &mut d.empathy),
        ] {
            let Some(value) = value else { continue };
            *slot = u8::try_from(value)
                .ok()
                .filter(|v| (1..=5).contains(v))
                .ok_or_else(|| CompatError::Invalid(format!("{name} must be between 1 and 5")))?;
        }
        let reflect_mission = keep(update.reflect_mission);
        if let Some(m) = &reflect_mission {
            // Hindsight 1.1 keeps the reflect mission as the bank's mission (and background).
            // The retain mission steers its LLM's fact extraction, which mneme does not do.
            profile.mission = m.clone();
            profile.background = Some(m.clone());
        }
        // Checked once the body is read, as the server reads it before it looks for the bank.
        if write == BankWrite::Change && !self.bank_exists(bank).await? {
            return Err(CompatError::NotFound(format!("Bank '{bank}' not found")));
        }
        // A server that reflects is given what steers it (kept only here, its reflect went on
        // without the mission and disposition the client set: review59 #9).
        let mission_set = mission_given || reflect_mission.is_some();
        let disposition_set = disposition_given;
        let d = &profile.disposition;
        let forwarded = mneme_core::BankProfileUpdate {
            mission: mission_set.then(|| profile.mission.clone()),
            disposition: disposition_set.then_some([d.skepticism, d.literalism, d.empathy]),
        };
        self.queue.backend().set_bank_profile(bank, &forwarded).await?;
        self.spool.save_record(BANK_RECORD, bank, serde_json::to_string(&profile).expect("plain data")).await?;
        Ok(profile)
    }

    /// Delivers what clients retained into `bank` and is still queued, waiting a moment at most
    /// (as a session's recall does for its own): an asynchronous retain was not recalled until
    /// the queue's interval had passed, 5 s, where the server takes well under one (review59 #3).
    pub(super) async fn deliver_bank_retains(&self, bank: &str) {
        let queues = self.bank_queues(bank);
        if queues.is_empty() {
            return;
        }
        let wait = Duration::from_secs(1).min(self.settings().recall.timeout / 4);
        let flushes = queues.iter().map(|id| self.queue.flush(id));
        let _ = tokio::time::timeout(wait, futures_util::future::join_all(flushes)).await;
    }

    /// The queues of retains into `bank` (see `retain`'s queue ids) with something to deliver.
    fn bank_queues(&self, bank: &str) -> Vec<String> {
        let (whole, under) = (format!("hindsight:{bank}"), format!("hindsight:{bank}:"));
        self.queue.deliverable_among(|id| id == whole || id.starts_with(&under))
    }

    /// Whether `bank` is one there is: it has a profile, or memories (as the server makes a
    /// bank by writing to it). Said to be when the backend cannot tell.
    pub async fn bank_exists(&self, bank: &str) -> Result<bool, CompatError> {
        check_bank(bank)?;
        if self.spool.record(BANK_RECORD, bank).await?.is_some() {
            return Ok(true);
        }
        // Written to, and still queued: the server has it once that arrives (review61 #4). Asked
        // of the spool, which keeps each item's bank: a queue's id cannot tell bank `a` with
        // session `b:s` from bank `a:b` with session `s` (review62 #5).
        if self.spool.holds_bank(bank).await? {
            return Ok(true);
        }
        Ok(match self.queue.backend().banks().await {
            Ok(banks) => banks.iter().any(|b| b.bank == bank),
            Err(_) => true,
        })
    }

    /// A bank's profile (the defaults for a bank never configured: Hindsight creates banks on use).
    pub async fn bank(&self, bank: &str) -> Result<BankProfile, CompatError> {
        check_bank(bank)?;
        let stored = self.spool.record(BANK_RECORD, bank).await?;
        Ok(stored.and_then(|v| serde_json::from_str(&v).ok()).unwrap_or_else(|| BankProfile {
            bank_id: bank.to_owned(),
            name: bank.to_owned(),
            disposition: Disposition::default(),
            mission: String::new(),
            background: None,
        }))
    }

    /// One page of the banks with a profile whose id or name holds `q` (any case), by id.
    pub async fn banks(&self, q: Option<&str>, limit: usize, offset: usize) -> Result<BankList, CompatError> {
        let stored = self.spool.records(BANK_RECORD, "").await?;
        let wanted = q.map(str::to_lowercase).filter(|q| !q.is_empty());
        let mut profiles: Vec<BankProfile> = stored
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str::<BankProfile>(&v).ok())
            .filter(|p| {
                wanted
                    .as_ref()
                    .is_none_or(|q| p.bank_id.to_lowercase().contains(q) || p.name.to_lowercase().contains(q))
            })
            .collect();
        profiles.sort_by(|a, b| a.bank_id.cmp(&b.bank_id));
        let total = profiles.len();
        let banks = profiles
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|p| BankListItem {
                bank_id: p.bank_id,
                name: Some(p.name),
                disposition: p.disposition,
                mission: Some(p.mission),
                created_at: None,
                updated_at: None,
            })
            .collect();
        Ok(BankList { banks, total, limit, offset })
    }
}
