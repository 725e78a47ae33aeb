//! What is removed from text before it is stored: `<private>` spans (when `retain.strip_private`),
//! recalled memory blocks (never fed back), and messages with nothing to read.

use mneme_core::text::{self, Message};

use crate::config::Settings;

/// Private spans removed (when configured), memory blocks removed, trimmed; `None` if nothing is left.
pub fn clean(settings: &Settings, content: &str) -> Option<String> {
    let content = if settings.retain.strip_private { text::strip_private(content) } else { content.to_owned() };
    let content = text::strip_memory_tags(&content);
    let content = content.trim();
    (!content.is_empty()).then(|| content.to_owned())
}

/// Only user and assistant messages that hold a letter or digit (drops tool-only turns' ".").
pub(super) fn conversation(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .filter(|m| (m.role == "user" || m.role == "assistant") && text::has_substance(&m.content))
        .cloned()
        .collect()
}

/// Cleans a memory that arrives whole (an import) like a retain: private spans are removed from
/// every text field. `false` when no content is left (the memory is not stored).
pub fn clean_imported(settings: &Settings, m: &mut mneme_core::StoredMemory) -> bool {
    // Stored as every date is, RFC 3339 UTC with milliseconds (`+05:30`, a date alone, a space
    // for the `T` were kept as sent, and sorted and shown as such); none (a Hindsight memory
    // without one) is now.
    m.created_at = crate::hindsight_api::time::normalize(&m.created_at)
        .unwrap_or_else(|| mneme_core::time::rfc3339_millis(std::time::SystemTime::now()));
    if settings.retain.strip_private {
        m.context = m.context.as_deref().map(text::strip_private).filter(|c| !c.trim().is_empty());
        m.document_id = m.document_id.as_deref().map(text::strip_private).filter(|d| !d.trim().is_empty());
        m.tags = text::strip_private_list(std::mem::take(&mut m.tags));
        text::strip_private_map(&mut m.metadata);
    }
    match clean(settings, &m.content) {
        Some(content) => {
            m.content = content;
            true
        }
        None => false,
    }
}
