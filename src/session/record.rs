//! A session as it is kept in the spool: its record, the tail automatic retain holds back, and
//! what is remembered of one that ended.

use mneme_core::Scope;
use serde::{Deserialize, Serialize};

use super::ToolNames;

/// A transcript automatic retain has prepared but not queued yet (the cadence was not reached):
/// queued when the session ends or goes idle, so a session's last turns are never lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRetain {
    /// The cleaned transcript.
    pub content: String,
    /// The document it replaces or starts.
    pub document_id: String,
    /// User turns it covers, counted from the session's start.
    pub user_turns: i64,
    /// A slice of the part's turns (those from this one on) stored as a document of its own
    /// (`full-session`, a transcript sent without its start): once queued, the part's document
    /// leaves them out ([`Session::sliced`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliced_from: Option<i64>,
}

/// A turn sent alone, stored as a slice of its part ([`Session::alone_slices`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AloneSlice {
    /// The part it belongs to.
    pub part: u32,
    /// The user turn (from 0).
    pub turn: i64,
    /// Its document.
    pub document: String,
}

/// The most turns sent alone a session keeps for a whole transcript to complete
/// ([`Session::alone_slices`]): a client that only ever sends turns alone keeps the latest.
pub(super) const MAX_ALONE_SLICES: usize = 32;

/// What automatic retain knows of a session that ended, among the last [`ENDED_KEPT`], in case the
/// agent starts it again under the same id (a resumed conversation): its part and its turns'
/// fingerprints, so its next transcript goes on where it stopped instead of replacing the part
/// it retained first. No text: fingerprints only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Ended {
    /// When it ended (unix seconds), for forgetting it.
    pub(super) at: u64,
    pub(super) part: u32,
    pub(super) retained_turns: i64,
    pub(super) turn_prints: Vec<u64>,
    #[serde(default)]
    pub(super) first_turn: i64,
    /// The session's open `<private>` spans ([`Session::open_at_part_start`], `open_at_end`):
    /// a resumed session goes on inside them.
    #[serde(default, skip_serializing_if = "is_none_open")]
    pub(super) open_at_part_start: usize,
    #[serde(default, skip_serializing_if = "is_none_open")]
    pub(super) open_at_end: usize,
    /// [`Session::last_turn_document`]: a resumed session's slices are not named as its earlier ones.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub(super) last_turn_document: u64,
    /// [`Session::sliced`] and [`Session::part_stored`]: a resumed session's document goes on
    /// leaving out its slices, and is not replaced by less.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) sliced: Vec<(i64, i64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) part_stored: Option<StoredPart>,
    /// Where its conversation was stored: started again in another scope (another project's
    /// folder), it goes on there in a part of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) scope: Option<Scope>,
    /// The [`SESSION_FORMAT`] its turn prints were made in (0: an earlier mneme's record).
    #[serde(default)]
    pub(super) format: u32,
    /// [`Session::last_reply_print`]: a resumed client that sends a turn at a time, whose user
    /// sends the last prompt again ("continue"), has a turn of its own, not a resend.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub(super) last_reply_print: u64,
    /// [`Session::recent_reply_prints`]: a resumed session's rewind that sends the prompt taken
    /// back again is told from a late copy as before it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) recent_reply_prints: Vec<u64>,
    /// [`Session::hidden_from_turns`]: a resumed session goes on hiding them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) hidden_from_turns: Vec<(i64, i64)>,
    /// Its conversation was forgotten (a forget of its document, a clear of its scope) after it
    /// ended: started again, it goes on from its next turn in a part of its own, as a live
    /// session does after one, instead of storing the forgotten turns again with the next
    /// transcript.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) erased: bool,
    /// The `retain.mode` it ended under (none in an earlier mneme's record): started again
    /// under another, it goes on from its next turn in a part of its own, as a live session does
    /// after a reload that changes the mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) retain_mode: Option<String>,
    /// [`Session::turns_had_off`]: a resumed session goes on keeping them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) turns_had_off: Vec<(u64, i64, u64)>,
}

pub(super) const ENDED_RECORD: &str = "ended_session";

/// How many ended sessions' records are kept, the last ended: started again under its id, such
/// a session goes on where it stopped. (Kept 30 days, once, by the clock: a session resumed
/// later, its history compacted since, began again at its first part and replaced that
/// document, and the turns before the compaction were lost (review63 #4); and one start with
/// the clock years ahead forgot them all (review68 #2).) A few KB each.
pub(super) const ENDED_KEPT: usize = 20_000;

/// Records without which a resume would do harm, kept apart from [`ENDED_KEPT`], up to this
/// many: a session that ended inside an open `<private>` span (resumed without it, the rest of
/// the span was stored in the clear), one whose conversation was erased (its cleared turns
/// stored again), one past its first part (its first document replaced by a compacted
/// history). 20,000 short sessions ending after one of them evicted it (review70 #4).
pub(super) const ENDED_THAT_MATTER_KEPT: usize = 200_000;

/// Over a record's JSON (column `record`): whether it is one of those
/// [`ENDED_THAT_MATTER_KEPT`] counts.
macro_rules! ended_that_matters {
    () => {
        "coalesce(json_extract(record, '$.open_at_end'), 0) > 0
            OR coalesce(json_extract(record, '$.open_at_part_start'), 0) > 0
            OR coalesce(json_extract(record, '$.erased'), 0) = 1
            OR coalesce(json_extract(record, '$.part'), 0) > 0"
    };
}
pub(super) const ENDED_THAT_MATTER: &str = ended_that_matters!();
/// The others: those [`ENDED_KEPT`] counts.
pub(super) const ENDED_PLAIN: &str = concat!("NOT (", ended_that_matters!(), ")");

/// A session as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The agent's id for it.
    pub id: String,
    /// Working directory it started in.
    pub cwd: String,
    /// Agent name, when given.
    pub agent: Option<String>,
    /// Parent session: this one is an alias of it.
    pub parent: Option<String>,
    /// Where its memories go.
    pub scope: Scope,
    /// Project label the scope came from.
    pub project: String,
    /// First-turn recall done.
    pub recalled: bool,
    /// The cached `<memories>` block.
    pub block: Option<String>,
    /// User turns already retained automatically.
    pub retained_turns: i64,
    /// When the session was last saved (unix seconds); idle sessions are forgotten after
    /// [`SESSION_TTL`].
    #[serde(default)]
    pub last_seen: u64,
    /// The tools the client offers (`None`: it did not say).
    #[serde(default)]
    pub tools: Option<ToolNames>,
    /// The not yet retained tail of the conversation.
    #[serde(default)]
    pub pending: Option<PendingRetain>,
    /// The prompt of the work turn under way (cleaned; "" when nothing of it is kept): a client
    /// whose transcript lags behind (Claude Code's) still has the turn retained whole. Taken
    /// when the turn ends.
    #[serde(default)]
    pub last_prompt: Option<String>,
    /// The latest prompt left a `<private>` span open: a reply that closes it is hidden up to the
    /// close even when the transcript lacks the prompt (only its cleaned text is kept).
    #[serde(default)]
    pub last_prompt_left_private: bool,
    /// How many of the `<private>` spans its history left open the latest prompt closes: a
    /// transcript that lacks the prompt gets it with as many closing tags, or the turn (and
    /// every later one) stayed inside them (review80 #1).
    #[serde(default)]
    pub last_prompt_closes: usize,
    /// How many spans the latest prompt opened and left open (nested ones each count; `None`
    /// in a record of a build before this: one when it left a span open): a reply inside them
    /// stays hidden until as many are closed.
    #[serde(default)]
    pub last_prompt_opens: Option<usize>,
    /// The spans open before the latest prompt, as read in the history its agent-start came
    /// with (`None` in a record of a build before this): a turn sent alone is read from there,
    /// as its prompt's closes and opens were counted. Read from where the last transcript ended,
    /// the spans a turn whose end never came opened were not open, and the reply inside them was
    /// stored (review87 #3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt_open_before: Option<usize>,
    /// How many user turns came before the latest prompt (its turn's number): as its
    /// agent-start's history held them, or, without one, as the part knew of them then (`None`
    /// in a record of a build before this): a turn sent alone after turns whose end never came
    /// is numbered past them (review90 #2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt_turns_before: Option<usize>,
    /// Which part of the conversation automatic retain is in: a client whose history starts
    /// over (compacted, or each turn sent as a history of its own) begins a new part, so the
    /// transcript it retains next is a document of its own and never replaces the turns
    /// retained before. (A turn sent alone, its reply with no history, is the part's next turn.)
    #[serde(default)]
    pub part: u32,
    /// Fingerprints of the current part's user messages (cleaned; 0 for one wholly private), as
    /// far as the client has sent them: to tell a history that goes on, or comes without its
    /// start, from one that starts over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turn_prints: Vec<u64>,
    /// The first user turn of the part that is retained (counted in the client's history from
    /// 0): the turns before it were had while memory was off, and are never retained.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first_turn: i64,
    /// What the backend adds to the session's instructions (the local store: its most recent
    /// memories), as first asked: the instructions then stay the same from one model call to
    /// the next, and the agent's prompt cache warm. Asked again after a re-scope or a clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `<private>` spans open where the current part's history begins: the last transcript of
    /// the part before left them open (a client that sends each turn as a history of its own, a
    /// history compacted inside a span).
    #[serde(default, skip_serializing_if = "is_none_open")]
    pub open_at_part_start: usize,
    /// The spans the last transcript left open at its end.
    #[serde(default, skip_serializing_if = "is_none_open")]
    pub open_at_end: usize,
    /// The fingerprints of the part before this one (see `turn_prints`): a late copy of its
    /// history, sent after the part began, is known for what it is instead of starting one more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_part_prints: Vec<u64>,
    /// The spans open where the part before this one began (see `open_at_part_start`): a whole
    /// history that holds that part is read from there when it is looked for in it.
    #[serde(default, skip_serializing_if = "is_none_open")]
    pub previous_part_open_at_start: usize,
    /// The turns passed over while automatic retain kept nothing (memory `off`, or
    /// `retain.auto = false`), at most [`MAX_TURNS_HAD_OFF`]: the fingerprint of the first prompt
    /// of the conversation each was had in ([`UNKNOWN_CONVERSATION`] when its start was never
    /// seen), its place in it and its prompt's fingerprint. A turn a later history of the same
    /// conversation holds at the same place with the same prompt is never stored, whatever that
    /// history is taken for (see `hide_turns_had_off`). Entries at [`TURN_ITSELF`] stand for a
    /// turn whose place was a guess: its prompt and a reply, wherever a history holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns_had_off: Vec<(u64, i64, u64)>,
    /// The fingerprint of the reply that ended the last transcript (cleaned; 0 when it had none
    /// or it was wholly private): a client that sends a turn at a time and a prompt the same as
    /// the one before ("continue", or two wholly private ones) sends a new turn, not the last
    /// again, when its reply is another.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub last_reply_print: u64,
    /// The replies that ended the last turns of the transcripts sent lately (their words'
    /// fingerprints, see [`reply_print`], at most [`MAX_RECENT_REPLIES`], oldest first): a
    /// history whose prompts are all known but whose last turn's reply is none of them is not a
    /// late copy. A rewind
    /// followed by the prompt taken back (both clients offer it again) was taken for one, and
    /// its new reply never stored; a window of repeated prompts ("yes", "yes") was placed over
    /// the turns known, and its new turns never stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_reply_prints: Vec<u64>,
    /// For each stray `</private>` of the part (a close whose opening tag is in no earlier
    /// message), in order, the first turn it hid messages of (the first not retained when it
    /// came) and the turn it is in. What it hid stays hidden in what later turns store, and what was stored before it
    /// came stays. Shown once their turn counted as retained, the next turn's document (or
    /// slice's overlap) stored them, and so did a resend of the same transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_from_turns: Vec<(i64, i64)>,
    /// The milliseconds in the name of the last document of its own automatic retain gave a
    /// slice of the session's turns (`{session}-{ms}`): the next is named past it, whatever the
    /// clock says after a restart. 0 before the first.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub last_turn_document: u64,
    /// The part's user turns stored as documents of their own (`[from, to)`, from transcripts
    /// sent without their start): the part's document leaves them out. A whole transcript that
    /// followed stored them a second time in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sliced: Vec<(i64, i64)>,
    /// The part's turns sent alone (a reply with no transcript) and stored as slices
    /// (`full-session`), newest last, at most [`MAX_ALONE_SLICES`]: a whole transcript that
    /// holds one of them and the turn after it gives its document the turn as the transcript
    /// holds it (the agent's messages before its last reply, or after a stop a hook blocked,
    /// which the turn sent alone lacks; the part's document leaves the turn out: review87 #6).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alone_slices: Vec<AloneSlice>,
    /// What the part's document was last given (`full-session`): a later transcript holding less
    /// of those turns does not replace it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_stored: Option<StoredPart>,
    /// [`SESSION_FORMAT`] when the record knows its part's slices and what its document holds;
    /// 0 in a record an earlier mneme saved (see [`Sessions::load`]).
    #[serde(default)]
    pub format: u32,
    /// The part's turns were counted from transcripts without their slash commands (the Claude
    /// Code hooks before format 2 left a command out; now one run with arguments is a turn): the
    /// next whole transcript is placed among them with its commands aside, once, and the turn
    /// numbers kept are moved to where the turns stand in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub commands_unseen: bool,
    /// The slash commands run while `commands_unseen` (their prints, see
    /// `placement::command_print`): none of them is one the earlier build saw, though its reply
    /// may never have come (an interrupted turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands_since_upgrade: Vec<String>,
}

/// The format of a session record. 1: it knows `sliced` and `part_stored`; a record without them
/// (saved by an earlier mneme, or by one after a downgrade) goes on in a part of its own: its
/// slices unknown, a whole transcript stored them a second time; its document's size unknown,
/// a compacted history replaced it by less. 2: its turns count the slash commands the Claude
/// Code hooks keep as turns; in a record before, the next whole transcript places them
/// ([`Session::commands_unseen`]): placed by the numbers kept, its history looked rewritten, and
/// a new part held the whole conversation again.
pub const SESSION_FORMAT: u32 = 2;

/// The replies [`Session::recent_reply_prints`] keeps at most: a late copy is a few turns late
/// at most, and the record is saved at every turn (each costs it some 20 bytes).
pub const MAX_RECENT_REPLIES: usize = 16;

/// A reply's fingerprint by its words (blanks, line ends and a client's trimming aside), as
/// [`Session::recent_reply_prints`] keeps it.
pub fn reply_print(cleaned: &str) -> u64 {
    // Its spans left out whatever `retain.strip_private` is (see `placement::message_print`).
    super::placement::fingerprint(&super::placement::as_typed(&super::placement::without_spans(cleaned)))
}

/// A conversation whose first prompt was never seen (see [`Session::turns_had_off`]): agrees with
/// every conversation.
pub const UNKNOWN_CONVERSATION: u64 = u64::MAX;

/// The place of an entry of [`Session::turns_had_off`] that stands for a turn itself, wherever a
/// history holds it: its print mixes its prompt's with one of its replies' (see
/// `itself::turns_themselves`). No turn's place (places count from 0), so an earlier mneme
/// reading the record matches no turn with it.
pub const TURN_ITSELF: i64 = i64::MIN;

/// At most this many turns had while nothing was retained are kept in a session's record (the
/// latest), ~30 bytes each in the spool, and in an ended session's.
pub const MAX_TURNS_HAD_OFF: usize = 256;

/// The transcript last queued as a part's document (see [`Session::part_stored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPart {
    /// The part it is the document of.
    pub part: u32,
    /// The user turns it holds, counted from the session's start.
    pub turns: i64,
    /// Its length in bytes.
    pub chars: usize,
}

pub(super) fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

pub(super) fn is_none_open(n: &usize) -> bool {
    *n == 0
}

pub(super) fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Session {
    /// The queue its retains join: the parent's for an alias.
    pub fn queue_id(&self) -> &str {
        self.parent.as_deref().unwrap_or(&self.id)
    }

    /// The spans a turn sent alone (its reply with no history) begins inside: those its prompt
    /// was read inside at agent-start ([`Session::last_prompt_open_before`]), else those the
    /// last transcript left open.
    pub(super) fn alone_turn_opens_inside(&self) -> usize {
        self.last_prompt_open_before.unwrap_or(self.open_at_end)
    }

    /// The user turn (from 0) a turn sent alone is: past every turn the part knows of, counted
    /// (`turn_prints`), retained or passed over (`retained_turns`, `first_turn`: a transcript
    /// sent without its start while memory was off is counted there, not printed), and past
    /// those its prompt's agent-start saw before it (turns whose end never came). Numbered one
    /// short, the next whole transcript did not line up with the part, started a part over, and
    /// stored turns twice, a turn had while memory was off among them (review90 #1, #2).
    pub(super) fn alone_turn_number(&self) -> usize {
        let counted = |n: i64| usize::try_from(n).unwrap_or(0);
        self.turn_prints
            .len()
            .max(counted(self.retained_turns))
            .max(counted(self.first_turn))
            .max(self.last_prompt_turns_before.unwrap_or(0))
    }

    /// Moves it to another scope: what was recalled for the old one (the block, the cached
    /// instructions) no longer applies, and the conversation so far stays where it was stored:
    /// automatic retain goes on from the next turn in a part of its own. (Its document, given
    /// the whole part again, replaced the old scope's: in one bank with project tags the old
    /// project lost the conversation, and the new one got its turns.) The pending tail is
    /// queued under the old scope before a move ([`Sessions::queue_tail_before_move`]); one
    /// that arrives between the two goes with the session, whole. Whether it moved.
    pub(super) fn move_to(&mut self, scope: &Scope, project: &str) -> bool {
        if self.scope == *scope {
            return false;
        }
        self.scope = scope.clone();
        self.project = project.to_owned();
        self.recalled = false;
        self.block = None;
        self.instructions = None;
        if self.pending.is_none() {
            super::clear::start_after_erasure(self);
        }
        true
    }
}
