//! Mental models: a named recall query whose answer clients inject into their prompt. Hindsight
//! summarises the answer with an LLM; mneme keeps what recall answers for the query, bounded by
//! the model's `max_tokens`, computed when the model is created or refreshed, and again in the
//! background when a client reads a model older than [`MODEL_STALE_AFTER`].

use std::time::{Duration, SystemTime};

use mneme_core::{RecallQuery, TagsMatch};
use serde_json::Value;

use super::wire::{
    CreateMentalModel, Detail, MentalModel, MentalModelList, ModelListQuery, OperationAnswer, RefreshAnswer,
    UpdateMentalModel,
};
use super::{check_bank, CompatError, HindsightApi};

/// A model read after this long has its content recomputed in the background.
pub const MODEL_STALE_AFTER: Duration = Duration::from_secs(60);

const MODEL_RECORD: &str = "hindsight_mental_model";

/// The record key: bank, a unit separator, the id (so a bank's models share a prefix).
fn key(bank: &str, id: &str) -> String {
    format!("{bank}\u{1f}{id}")
}

impl HindsightApi {
    /// A bank's models that `query` lists, by name, one page of them shown at its detail; stale
    /// ones on the page are refreshed in the background.
    pub async fn mental_models(&self, bank: &str, query: &ModelListQuery) -> Result<MentalModelList, CompatError> {
        check_bank(bank)?;
        let mut models = self.stored_models(bank).await?;
        models.retain(|m| query.lists(&m.tags, m.is_knowledge_page));
        models.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.id.cmp(&b.id)));
        let total = models.len();
        let page: Vec<MentalModel> = models.into_iter().skip(query.offset).take(query.limit).collect();
        if query.detail != Detail::Metadata {
            self.refresh_stale_in_background(bank, &page);
        }
        let items: Vec<Value> = page.iter().map(|m| shown(m, query.detail)).collect();
        Ok(MentalModelList { limit: query.limit, items, total, offset: query.offset })
    }

    /// One model at `detail`.
    pub async fn mental_model(&self, bank: &str, id: &str, detail: Detail) -> Result<Value, CompatError> {
        check_bank(bank)?;
        let model = self.stored_model(bank, id).await?;
        if detail != Detail::Metadata {
            self.refresh_stale_in_background(bank, std::slice::from_ref(&model));
        }
        Ok(shown(&model, detail))
    }

    /// Creates a model and computes its content at once.
    pub async fn create_mental_model(
        &self,
        bank: &str,
        req: CreateMentalModel,
    ) -> Result<OperationAnswer, CompatError> {
        check_bank(bank)?;
        let settings = self.settings();
        // Hindsight takes any name, an empty one too.
        let name = crate::session::clean_text(&settings, &req.name).unwrap_or_default();
        let source_query = crate::session::clean_text(&settings, &req.source_query)
            .ok_or_else(|| CompatError::Invalid("source_query must not be empty".into()))?;
        let id = match req.id.as_deref().map(str::trim) {
            Some(id) if !id.is_empty() => {
                check_model_id(id)?;
                id.to_owned()
            }
            _ => crate::ids::new_id(),
        };
        let conflict = || CompatError::Conflict(format!("mental model {id:?} already exists in bank {bank:?}"));
        if self.model_exists(bank, &id).await? {
            return Err(conflict());
        }
        let mut model = MentalModel {
            id: id.clone(),
            bank_id: bank.to_owned(),
            name,
            source_query: Some(source_query),
            content: Some(String::new()),
            tags: model_tags(&settings, &req.tags)?,
            max_tokens: Some(model_tokens(req.max_tokens)?),
            trigger: Some(full_trigger(checked_trigger(req.trigger)?)),
            created_at: Some(mneme_core::time::rfc3339_millis(SystemTime::now())),
            ..MentalModel::default()
        };
        for attempt in 1.. {
            let computed = self.compute(&mut model).await;
            // Another create of this id may have landed during the recall.
            let _write = self.model_writes.lock().await;
            if self.model_exists(bank, &id).await? {
                return Err(conflict());
            }
            if self.forgot_since(bank, computed) && !emptied_after_attempts(&mut model, attempt) {
                continue;
            }
            self.save_model(&model).await?;
            break;
        }
        Ok(OperationAnswer { mental_model_id: Some(id), operation_id: super::new_operation_id() })
    }

    /// Changes a model's name, query, tags, bound or trigger; a new query or tags recompute it.
    pub async fn update_mental_model(
        &self,
        bank: &str,
        id: &str,
        req: UpdateMentalModel,
    ) -> Result<Value, CompatError> {
        check_bank(bank)?;
        let mut model = self.stored_model(bank, id).await?;
        let settings = self.settings();
        let recompute = req.source_query.is_some() || req.tags.is_some() || req.max_tokens.is_some();
        let trigger = match req.trigger.is_some() {
            true => Some(full_trigger(checked_trigger(req.trigger)?)),
            false => None,
        };
        // As on create: a query given blank (or all private) is refused, not skipped; a name may
        // be empty.
        let edit = |model: &mut MentalModel| -> Result<(), CompatError> {
            if let Some(name) = req.name.as_deref() {
                model.name = crate::session::clean_text(&settings, name).unwrap_or_default();
            }
            if let Some(q) = req.source_query.as_deref() {
                model.source_query = Some(
                    crate::session::clean_text(&settings, q)
                        .ok_or_else(|| CompatError::Invalid("source_query must not be empty".into()))?,
                );
            }
            if let Some(tags) = &req.tags {
                model.tags = model_tags(&settings, tags)?;
            }
            if let Some(n) = req.max_tokens {
                model.max_tokens = Some(model_tokens(n)?);
            }
            if let Some(t) = &trigger {
                model.trigger = Some(t.clone());
            }
            Ok(())
        };
        edit(&mut model)?;
        for attempt in 1.. {
            let computed = if recompute { Some(self.compute(&mut model).await) } else { None };
            let _write = self.model_writes.lock().await;
            // Deleted during the recall: not brought back.
            let stored = self.stored_model(bank, id).await?;
            if !recompute {
                // Only the name or the trigger: the edit lands on the model as it is now, whose
                // content a forget may have computed again since it was read (saved over, the
                // copy read before brought the forgotten memory back).
                model = stored;
                edit(&mut model)?;
            } else if computed.is_some_and(|c| self.forgot_since(bank, c))
                && !emptied_after_attempts(&mut model, attempt)
            {
                continue;
            }
            self.save_model(&model).await?;
            break;
        }
        Ok(shown(&model, Detail::Full))
    }

    /// Deletes a model.
    pub async fn delete_mental_model(&self, bank: &str, id: &str) -> Result<(), CompatError> {
        check_bank(bank)?;
        let _write = self.model_writes.lock().await;
        if self.spool.delete_record(MODEL_RECORD, &key(bank, id)).await? {
            Ok(())
        } else {
            Err(not_found(bank, id))
        }
    }

    /// Recomputes a model's content now.
    pub async fn refresh_mental_model(&self, bank: &str, id: &str) -> Result<RefreshAnswer, CompatError> {
        check_bank(bank)?;
        let mut model = self.stored_model(bank, id).await?;
        let computed = self.compute(&mut model).await;
        self.save_computed(&model, computed).await?;
        Ok(RefreshAnswer { operation_id: super::new_operation_id(), status: "completed".into() })
    }

    /// After a forget or a clear: every model of `bank` (of every bank: `None`) is computed
    /// again now, so none goes on serving what was forgotten; one whose recall fails is left
    /// empty rather than as it was.
    pub async fn recompute_after_forget(&self, bank: Option<&str>) {
        // Called once the forget is done: a computation that began before this was counted
        // may have recalled what it removed, and is not saved.
        self.forget_counts().counted(bank);
        let prefix = bank.map(|b| key(b, "")).unwrap_or_default();
        let records = match self.spool.records(MODEL_RECORD, &prefix).await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!("cannot recompute the mental models after a forget: {e}");
                return;
            }
        };
        for (_, record) in records {
            let Ok(mut model) = serde_json::from_str::<MentalModel>(&record) else { continue };
            model.content = Some(String::new());
            let computed = self.compute(&mut model).await;
            if let Err(e) = self.save_computed(&model, computed).await {
                tracing::warn!(bank = model.bank_id, model = model.id, "cannot save a recomputed mental model: {e}");
            }
        }
    }

    async fn stored_models(&self, bank: &str) -> Result<Vec<MentalModel>, CompatError> {
        let prefix = key(bank, "");
        Ok(self
            .spool
            .records(MODEL_RECORD, &prefix)
            .await?
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str(&v).ok())
            .collect())
    }

    async fn stored_model(&self, bank: &str, id: &str) -> Result<MentalModel, CompatError> {
        self.spool
            .record(MODEL_RECORD, &key(bank, id))
            .await?
            .and_then(|v| serde_json::from_str(&v).ok())
            .ok_or_else(|| not_found(bank, id))
    }

    async fn model_exists(&self, bank: &str, id: &str) -> Result<bool, CompatError> {
        Ok(self.spool.record(MODEL_RECORD, &key(bank, id)).await?.is_some())
    }

    async fn save_model(&self, model: &MentalModel) -> Result<(), CompatError> {
        let record = serde_json::to_string(model).expect("plain data serializes");
        Ok(self.spool.save_record(MODEL_RECORD, &key(&model.bank_id, &model.id), record).await?)
    }

    /// Saves what [`Self::compute`] found onto the model as it stands now: not when it was
    /// deleted meanwhile (it was brought back), nor when its query, tags or bound changed (its
    /// update computed its own content; this one answered the old query), nor when something
    /// was forgotten since it began (the recompute after the forget saves its own).
    async fn save_computed(&self, computed: &MentalModel, began: Computed) -> Result<(), CompatError> {
        let _write = self.model_writes.lock().await;
        if self.forgot_since(&computed.bank_id, began) {
            return Ok(());
        }
        let Ok(mut model) = self.stored_model(&computed.bank_id, &computed.id).await else { return Ok(()) };
        let same_inputs = (&model.source_query, &model.tags, model.max_tokens)
            == (&computed.source_query, &computed.tags, computed.max_tokens);
        if !same_inputs {
            return Ok(());
        }
        model.content = computed.content.clone();
        model.last_refreshed_at = computed.last_refreshed_at.clone();
        model.last_full_refreshed_at = computed.last_full_refreshed_at.clone();
        model.last_refresh_failed_at = computed.last_refresh_failed_at.clone();
        self.save_model(&model).await
    }

    /// Whether a forget or a clear was done since a computation began.
    fn forgot_since(&self, bank: &str, began: Computed) -> bool {
        self.forget_counts().of(bank) != began.forgets
    }

    fn forget_counts(&self) -> std::sync::MutexGuard<'_, ForgetCounts> {
        self.forgets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the content to what recall answers for the source query now. A backend that fails
    /// leaves the content as it was (clients render nothing for an empty model).
    async fn compute(&self, model: &mut MentalModel) -> Computed {
        let began = Computed { forgets: self.forget_counts().of(&model.bank_id) };
        self.compute_content(model).await;
        began
    }

    async fn compute_content(&self, model: &mut MentalModel) {
        /// What a result's line adds to its text: `- ` and the line end.
        const LINE_UNITS: usize = 4;
        let Some(query) = model.source_query.clone() else { return };
        let max_tokens = model.max_tokens.unwrap_or(2048);
        let budget = max_tokens.saturating_mul(4);
        let filter = ModelFilter::of(model);
        let (tags, tags_match) = super::recall::backend_filter(filter.tags, filter.tags_match, &filter.groups);
        let q = RecallQuery {
            query,
            budget: mneme_core::Budget::Mid,
            // Room for the first line's "- " and its line end: asked for the whole budget, a long
            // first result's window filled it, the line did not fit, and the model was empty.
            max_tokens: (budget.saturating_sub(LINE_UNITS) / 4).max(1),
            types: filter.types,
            tags,
            tags_match,
            deadline: None,
        };
        match self.recall_query(&model.bank_id, &q).await {
            Ok(mut results) => {
                results.retain(|r| super::recall::passes(&filter.groups, r.tags.as_deref().unwrap_or_default()));
                let line = |r: &super::RecallResult| format!("- {}\n", r.text.trim());
                let (mut fitted, mut used) = (Vec::new(), 0);
                for r in results {
                    let units = mneme_core::text::budget_units(&line(&r));
                    // One that does not fit is left out for shorter ones after it.
                    if used + units <= budget {
                        used += units;
                        fitted.push(r);
                    }
                }
                // As recall answers it: a turn the model shows once (after the fit, see `repeats`).
                let fitted = mneme_core::repeats::without_repeats(fitted, |r| &mut r.text);
                let content: String = fitted.iter().map(line).collect();
                let now = mneme_core::time::rfc3339_millis(SystemTime::now());
                model.content = Some(content.trim_end().to_owned());
                model.last_refreshed_at = Some(now.clone());
                model.last_full_refreshed_at = Some(now);
            }
            Err(e) => {
                tracing::debug!(bank = model.bank_id, model = model.id, "mental model not refreshed: {e}");
                model.last_refresh_failed_at = Some(mneme_core::time::rfc3339_millis(SystemTime::now()));
            }
        }
    }

    /// Recomputes, one bank at a time and off the request, the models among `models` that are stale.
    fn refresh_stale_in_background(&self, bank: &str, models: &[MentalModel]) {
        let stale: Vec<String> = models.iter().filter(|m| is_stale(m)).map(|m| m.id.clone()).collect();
        if stale.is_empty() || !self.refreshing.lock().unwrap_or_else(|e| e.into_inner()).insert(bank.to_owned()) {
            return;
        }
        let (api, bank) = (self.clone(), bank.to_owned());
        tokio::spawn(async move {
            for id in stale {
                // Deleted meanwhile: nothing to refresh.
                if let Ok(mut model) = api.stored_model(&bank, &id).await {
                    let computed = api.compute(&mut model).await;
                    if let Err(e) = api.save_computed(&model, computed).await {
                        tracing::debug!(bank, model = id, "cannot save a refreshed mental model: {e}");
                    }
                }
            }
            api.refreshing.lock().unwrap_or_else(|e| e.into_inner()).remove(&bank);
        });
    }
}

/// A model computed across a forget (its recall may have found what was forgotten) is computed
/// again; after [`COMPUTE_ATTEMPTS`] such, it is saved empty and stale, to be computed when next
/// read. Whether it is to be saved now.
fn emptied_after_attempts(model: &mut MentalModel, attempt: usize) -> bool {
    if attempt < COMPUTE_ATTEMPTS {
        return false;
    }
    model.content = Some(String::new());
    model.last_refreshed_at = None;
    true
}

/// How many times a create or an update computes a model that forgets keep overtaking.
const COMPUTE_ATTEMPTS: usize = 3;

/// When a model's content was computed: how many forgets touching its bank had been done when
/// it began.
#[derive(Clone, Copy)]
struct Computed {
    forgets: u64,
}

/// Forgets and clears done so far: of every bank (a clear, a forget naming no bank), and of each
/// bank. A bank's count is both: a forget in another bank does not void its models' computing
/// (their recompute after the forget was then not saved, and left what was forgotten in them).
#[derive(Default)]
pub(super) struct ForgetCounts {
    all: u64,
    banks: std::collections::HashMap<String, u64>,
}

impl ForgetCounts {
    fn counted(&mut self, bank: Option<&str>) {
        match bank {
            Some(b) => *self.banks.entry(b.to_owned()).or_default() += 1,
            None => self.all += 1,
        }
    }

    fn of(&self, bank: &str) -> u64 {
        self.all + self.banks.get(bank).copied().unwrap_or(0)
    }
}

/// A trigger as Hindsight answers it: every field, the defaults under what was sent, with
/// private spans removed from every string in it (it is stored as sent).
fn full_trigger(sent: Option<Value>) -> Value {
    let mut trigger = serde_json::json!({
        "budget": null, "mode": "full", "refresh_after_consolidation": false, "refresh_cron": null,
        "full_refresh_cron": null, "min_refresh_interval_seconds": null, "fact_types": null,
        "exclude_mental_models": false, "exclude_mental_model_ids": null, "tags_match": null,
        "tag_groups": null, "include_chunks": null, "recall_max_tokens": null,
        "recall_chunks_max_tokens": null, "reflect_search_observations_max_tokens": null,
        "reflect_search_observations_include_entities": null, "response_schema": null, "keep_trace": false,
    });
    if let (Some(Value::Object(sent)), Value::Object(all)) = (sent, &mut trigger) {
        for (k, v) in sent {
            all.insert(mneme_core::text::strip_private(&k), v);
        }
    }
    strip_private_strings(&mut trigger);
    trigger
}

/// The trigger sent, when the fields recall reads from it are what Hindsight's API types them
/// (`tag_groups`, `fact_types`, `tags_match`; null is "not given"): an object, its tag groups
/// naming at most [`mneme_core::MAX_FILTER_TAGS`] tags, none with a `<private>` tag, as a recall's
/// filter is refused otherwise. A field mneme could not read was stored and left out of the
/// model's filter, which then took in every project's memories; a filter over the bound left
/// the model never computed, and said so nowhere (review105 #2, #3). The messages do not repeat
/// what was sent.
fn checked_trigger(sent: Option<Value>) -> Result<Option<Value>, CompatError> {
    let Some(mut trigger) = sent.filter(|t| !t.is_null()) else { return Ok(None) };
    let Value::Object(fields) = &trigger else {
        return Err(CompatError::Invalid("trigger must be an object".into()));
    };
    let given = |name: &str| fields.get(name).filter(|v| !v.is_null()).cloned();
    if let Some(groups) = given("tag_groups") {
        let groups: Vec<super::wire::TagGroup> = serde_json::from_value(groups).map_err(|_| {
            CompatError::Invalid(
                "trigger.tag_groups must be a list of tag groups: {\"tags\": [strings], \"match\": …}, {\"and\": […]}, {\"or\": […]} or {\"not\": {…}}".into(),
            )
        })?;
        let named = super::recall::named_tags(&groups);
        crate::session::filter_tags(&named)
            .map_err(|why| CompatError::Invalid(format!("trigger.tag_groups: {why}")))?;
        if named.len() > mneme_core::MAX_FILTER_TAGS {
            return Err(CompatError::Invalid(format!(
                "trigger.tag_groups name {} tags; at most {} are accepted (they filter the model's recall)",
                named.len(),
                mneme_core::MAX_FILTER_TAGS
            )));
        }
    }
    if let Some(types) = given("fact_types") {
        serde_json::from_value::<Vec<mneme_core::MemoryType>>(types).map_err(|_| {
            CompatError::Invalid(
                "trigger.fact_types must be a list of \"world\", \"experience\" or \"observation\"".into(),
            )
        })?;
    }
    if let Some(tags_match) = given("tags_match") {
        serde_json::from_value::<TagsMatch>(tags_match).map_err(|_| {
            CompatError::Invalid(
                "trigger.tags_match must be \"any\", \"all\", \"any_strict\", \"all_strict\" or \"exact\"".into(),
            )
        })?;
    }
    // The rest of Hindsight's trigger, typed as its API types it (review107 #2), and read as
    // its server reads them (pydantic's lax mode: `3600.0` and `"3600"` are the integer 3600,
    // `"yes"` and `1` are true); kept in the type read, as the server keeps them, for a client
    // reads them back.
    let mut read = Vec::new();
    for (name, kind) in TRIGGER_FIELDS {
        if NOT_NULL.contains(&name) && fields.get(name).is_some_and(Value::is_null) {
            return Err(CompatError::Invalid(format!("trigger.{name} must be {}, not null", kind.said())));
        }
        if let Some(value) = given(name) {
            let value = kind
                .read(&value)
                .ok_or_else(|| CompatError::Invalid(format!("trigger.{name} must be {}", kind.said())))?;
            read.push((name, value));
        }
    }
    if let Value::Object(fields) = &mut trigger {
        for (name, value) in read {
            fields.insert(name.to_owned(), value);
        }
    }
    Ok(Some(trigger))
}

/// The type of one of a trigger's fields mneme keeps without reading.
#[derive(Debug, Clone, Copy)]
enum FieldKind {
    Bool,
    Text,
    Integer,
    /// An integer at least this.
    AtLeast(i64),
    OneOf(&'static [&'static str]),
    TextList,
    Object,
}

impl FieldKind {
    /// The value as Hindsight's server reads it for this type (pydantic's lax mode, measured
    /// against Hindsight 1.1.0), or None where the server refuses it.
    fn read(self, v: &Value) -> Option<Value> {
        let fits = match self {
            FieldKind::Bool => return lax_bool(v).map(Value::Bool),
            FieldKind::Integer => return lax_integer(v).map(Value::from),
            FieldKind::AtLeast(least) => return lax_integer(v).filter(|&n| n >= least).map(Value::from),
            FieldKind::Text => v.is_string(),
            FieldKind::OneOf(values) => v.as_str().is_some_and(|s| values.contains(&s)),
            FieldKind::TextList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            FieldKind::Object => v.is_object(),
        };
        fits.then(|| v.clone())
    }

    fn said(self) -> String {
        match self {
            FieldKind::Bool => "true or false".into(),
            FieldKind::Text => "a string".into(),
            FieldKind::Integer => "an integer".into(),
            FieldKind::AtLeast(least) => format!("an integer, at least {least}"),
            FieldKind::OneOf(values) => {
                let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
            FieldKind::TextList => "a list of strings".into(),
            FieldKind::Object => "an object".into(),
        }
    }
}

/// An integer as pydantic's lax mode reads one (measured against Hindsight 1.1.0): an integer, a
/// float with no fraction, a boolean, or a string of digits (blanks around it, a sign, `_`
/// between digits and a fraction of zeros allowed: `" 3_600.0 "`). A value out of i64 is refused.
fn lax_integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
        }),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::String(s) => {
            let (whole, fraction) = s.trim().split_once('.').unwrap_or((s.trim(), "0"));
            let digits = whole.strip_prefix(['+', '-']).unwrap_or(whole);
            let grouped = !digits.is_empty()
                && digits.split('_').all(|group| !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()));
            let zeros = !fraction.is_empty() && fraction.bytes().all(|b| b == b'0');
            (grouped && zeros).then(|| whole.replace('_', "").parse().ok()).flatten()
        }
        _ => None,
    }
}

/// A boolean as pydantic's lax mode reads one: a boolean, 0 or 1 (integer or float), or one of
/// its words for them in any case (no blanks around it).
fn lax_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_f64() {
            Some(0.0) => Some(false),
            Some(1.0) => Some(true),
            _ => None,
        },
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    }
}

/// The trigger's fields Hindsight's API does not take a null for (each has a default instead).
const NOT_NULL: [&str; 4] = ["mode", "refresh_after_consolidation", "exclude_mental_models", "keep_trace"];

/// Hindsight 1.1.0's `MentalModelTrigger` fields but the three recall reads (null is "not
/// given" for each).
const TRIGGER_FIELDS: [(&str, FieldKind); 15] = [
    ("budget", FieldKind::OneOf(&["low", "mid", "high"])),
    ("mode", FieldKind::OneOf(&["full", "delta"])),
    ("refresh_after_consolidation", FieldKind::Bool),
    ("refresh_cron", FieldKind::Text),
    ("full_refresh_cron", FieldKind::Text),
    ("min_refresh_interval_seconds", FieldKind::AtLeast(0)),
    ("exclude_mental_models", FieldKind::Bool),
    ("exclude_mental_model_ids", FieldKind::TextList),
    ("include_chunks", FieldKind::Bool),
    ("recall_max_tokens", FieldKind::Integer),
    ("recall_chunks_max_tokens", FieldKind::Integer),
    ("reflect_search_observations_max_tokens", FieldKind::AtLeast(1)),
    ("reflect_search_observations_include_entities", FieldKind::Bool),
    ("response_schema", FieldKind::Object),
    ("keep_trace", FieldKind::Bool),
];

/// A model's tags, cleaned; at most [`mneme_core::MAX_FILTER_TAGS`]: they filter its recall,
/// which refuses more (the model was then never computed, and said so nowhere).
fn model_tags(settings: &crate::config::Settings, tags: &[String]) -> Result<Vec<String>, CompatError> {
    if tags.len() > mneme_core::MAX_FILTER_TAGS {
        return Err(CompatError::Invalid(format!(
            "a mental model has at most {} tags (they filter its recall); {} were given",
            mneme_core::MAX_FILTER_TAGS,
            tags.len()
        )));
    }
    Ok(super::clean_list(settings, tags))
}

fn strip_private_strings(v: &mut Value) {
    match v {
        Value::String(s) => *s = mneme_core::text::strip_private(s),
        Value::Array(items) => items.iter_mut().for_each(strip_private_strings),
        Value::Object(map) => {
            // Keys at every depth too: a key is stored and served as much as a value is.
            *map = std::mem::take(map)
                .into_iter()
                .map(|(key, mut value)| {
                    strip_private_strings(&mut value);
                    (mneme_core::text::strip_private(&key), value)
                })
                .collect();
        }
        _ => {}
    }
}

fn is_stale(model: &MentalModel) -> bool {
    let refreshed = model.last_refreshed_at.as_deref().and_then(mneme_core::time::parse_rfc3339);
    // Refreshed "in the future": the clock was set back since, so how old it is is unknown
    // (taken as fresh, it stayed as it was until the clock caught up; review63 #3).
    refreshed.is_none_or(|at| at.elapsed().map_or(true, |age| age > MODEL_STALE_AFTER))
}

fn not_found(bank: &str, id: &str) -> CompatError {
    if mneme_core::text::has_private_tag(id) {
        // Never stored (create refuses it), and not repeated: it would reach the logs.
        return CompatError::NotFound(format!("mental model (an id with <private> text) not found in bank {bank:?}"));
    }
    CompatError::NotFound(format!("mental model {id:?} not found in bank {bank:?}"))
}

fn check_model_id(id: &str) -> Result<(), CompatError> {
    // First: see `check_bank`.
    if mneme_core::text::has_private_tag(id) {
        return Err(CompatError::Invalid("id may not contain <private> tags: ids are stored as they are".into()));
    }
    if id.contains('/') || matches!(id, "." | "..") || id.len() > 200 || id.chars().any(char::is_control) {
        return Err(CompatError::Invalid(
            "id must be at most 200 bytes without '/' or control characters, and not . or .. (a URL cannot name it)"
                .into(),
        ));
    }
    Ok(())
}

/// A model as answered at `detail`: as Hindsight does, metadata keeps every field but nulls
/// the query, content, bound and trigger.
fn shown(model: &MentalModel, detail: Detail) -> Value {
    let mut v = serde_json::to_value(model).expect("plain data serializes");
    let map = v.as_object_mut().expect("a struct is an object");
    if detail == Detail::Metadata {
        for k in ["source_query", "content", "max_tokens", "trigger"] {
            map.insert(k.to_owned(), Value::Null);
        }
    }
    map.insert("is_stale".to_owned(), Value::Bool(is_stale(model)));
    v
}

/// Hindsight's bounds on a mental model's `max_tokens` (its API answers 422 outside them).
const MODEL_TOKENS: std::ops::RangeInclusive<usize> = 256..=8192;

/// A mental model's `max_tokens`, checked against [`MODEL_TOKENS`].
fn model_tokens(n: usize) -> Result<usize, CompatError> {
    if MODEL_TOKENS.contains(&n) {
        Ok(n)
    } else {
        Err(CompatError::Invalid(format!(
            "max_tokens must be between {} and {} (got {n}); nothing was changed",
            MODEL_TOKENS.start(),
            MODEL_TOKENS.end()
        )))
    }
}

/// What a mental model's content is recalled from, as the Hindsight server refreshes one: its
/// trigger's `tag_groups` when given, else its tags matched by the trigger's `tags_match`, else
/// `all_strict` for a tagged model (the server's "security isolation": a project's model takes no
/// other project's memories, nor the untagged ones); only the trigger's `fact_types`, when given.
/// Matched with `any`, a model tagged `project:x` took in every global memory and every memory
/// that shared one of its tags.
struct ModelFilter {
    tags: Option<Vec<String>>,
    tags_match: Option<TagsMatch>,
    groups: Vec<super::wire::TagGroup>,
    types: Vec<mneme_core::MemoryType>,
}

impl ModelFilter {
    fn of(model: &MentalModel) -> Self {
        fn read<T: serde::de::DeserializeOwned>(trigger: Option<&Value>, name: &str) -> Option<T> {
            let field = trigger.and_then(|t| t.get(name)).filter(|v| !v.is_null())?;
            serde_json::from_value(field.clone()).ok()
        }
        let trigger = model.trigger.as_ref();
        let groups: Vec<super::wire::TagGroup> = read(trigger, "tag_groups").unwrap_or_default();
        let types = read(trigger, "fact_types").unwrap_or_default();
        if !groups.is_empty() {
            return ModelFilter { tags: None, tags_match: None, groups, types };
        }
        let tags_match = read(trigger, "tags_match").unwrap_or(match model.tags.is_empty() {
            true => TagsMatch::Any,
            false => TagsMatch::AllStrict,
        });
        ModelFilter { tags: Some(model.tags.clone()), tags_match: Some(tags_match), groups, types }
    }
}

#[cfg(test)]
mod tests {
    /// A forget in one bank voids the computing of that bank's models only; a clear (no bank)
    /// voids every bank's.
    #[test]
    fn forgets_count_per_bank_and_clears_for_all() {
        let mut counts = super::ForgetCounts::default();
        let (a, b) = (counts.of("a"), counts.of("b"));
        counts.counted(Some("b"));
        assert_eq!(counts.of("a"), a, "a forget in b leaves a's models alone");
        assert_ne!(counts.of("b"), b);
        let a = counts.of("a");
        counts.counted(None);
        assert_ne!(counts.of("a"), a);
    }

    /// Refreshed at a time ahead of the clock (set back since): stale, so the background refresh
    /// takes it (review63 #3); refreshed just now: fresh.
    #[test]
    fn a_model_refreshed_ahead_of_the_clock_is_stale() {
        use std::time::{Duration, SystemTime};
        let at = |t: SystemTime| super::MentalModel {
            last_refreshed_at: Some(mneme_core::time::rfc3339(t)),
            ..Default::default()
        };
        assert!(super::is_stale(&at(SystemTime::now() + Duration::from_secs(86_400))));
        assert!(!super::is_stale(&at(SystemTime::now())));
    }
}
