//! An OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 whose answers a test sets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mneme_core::MemoryItem;
use mneme_local::{EmbedderChoice, LocalBackend, LocalConfig, OpenAiConfig};

use super::item;

/// What the stub answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Answer {
    Vectors,
    /// After this many milliseconds.
    Slow(u64),
    /// Vectors of half the length.
    WrongLength,
    /// Vectors with a value past f32's range (`1e39`), which arrives as infinity.
    Overflowing,
    /// Vectors of zeros.
    Zeros,
    /// 401 to everything (a revoked key).
    Unauthorized,
    /// The answer's headers, then half its body, and the connection closed.
    BrokenOff,
    /// This many milliseconds a text (a slow model: a batch takes as long as its texts).
    SlowPerText(u64),
    /// 401 with a body that says the Authorization header it got (as some gateways do).
    EchoingUnauthorized,
    /// 307 to the endpoint on this port of 127.0.0.1.
    RedirectTo(u16),
    /// 200 whose `data` is a text that says the Authorization header it got.
    EchoingOk,
    /// This many milliseconds a byte of the texts (a model whose time grows with the text).
    SlowPerByte(u64),
    /// Vectors of the right length and of half of it, request by request (two models behind
    /// one name).
    Alternating,
}

pub const BROKEN_OFF: u64 = 1_000_000;
pub const UNAUTHORIZED: u64 = 1_000_001;
pub const ECHOING_UNAUTHORIZED: u64 = 1_000_002;
pub const ECHOING_OK: u64 = 1_000_003;
pub const SLOW_PER_BYTE: u64 = 4_000_000;
pub const SLOW_PER_TEXT: u64 = 2_000_000;
pub const REDIRECT: u64 = 3_000_000;
pub const ALTERNATING: u64 = 1_000_004;

/// An OpenAI-compatible `/v1/embeddings` server on 127.0.0.1: a word-hashing embedder of 64
/// dimensions (texts sharing words are near). It can be stopped (the port refuses connections)
/// and started again on the same port.
pub struct Stub {
    pub addr: SocketAddr,
    answer: Arc<AtomicU64>,
    pub requests: Arc<AtomicUsize>,
    running: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub const DIM: usize = 64;

impl Stub {
    pub fn start() -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut stub = Stub {
            addr,
            answer: Arc::new(AtomicU64::new(0)),
            requests: Arc::new(AtomicUsize::new(0)),
            running: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        stub.serve(listener);
        stub
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn set(&self, answer: Answer) {
        let code = match answer {
            Answer::Vectors => 0,
            Answer::WrongLength => 1,
            Answer::Overflowing => 2,
            Answer::Zeros => 3,
            Answer::BrokenOff => BROKEN_OFF,
            Answer::Unauthorized => UNAUTHORIZED,
            Answer::Slow(ms) => 4 + ms,
            Answer::SlowPerText(ms) => SLOW_PER_TEXT + ms,
            Answer::EchoingUnauthorized => ECHOING_UNAUTHORIZED,
            Answer::RedirectTo(port) => REDIRECT + u64::from(port),
            Answer::EchoingOk => ECHOING_OK,
            Answer::SlowPerByte(ms) => SLOW_PER_BYTE + ms,
            Answer::Alternating => ALTERNATING,
        };
        self.answer.store(code, Ordering::SeqCst);
    }

    pub fn stop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    pub fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).unwrap();
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        self.running.store(true, Ordering::SeqCst);
        let (answer, requests, running) = (self.answer.clone(), self.requests.clone(), self.running.clone());
        self.thread = Some(std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let n = requests.fetch_add(1, Ordering::SeqCst);
                        let answer = match answer.load(Ordering::SeqCst) {
                            ALTERNATING => u64::from(n % 2 == 1), // 1: the wrong length
                            code => code,
                        };
                        std::thread::spawn(move || handle(stream, answer));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn hashed(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim];
    for w in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let h = w
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        v[(h % dim as u64) as usize] += 1.0;
    }
    v
}

pub fn handle(stream: TcpStream, answer: u64) {
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    let mut authorization = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if line.to_ascii_lowercase().starts_with("authorization:") {
            authorization = line["authorization:".len()..].trim().to_owned();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut stream = stream;
    // A text the endpoint refuses (as llama.cpp's server refuses one over its batch size).
    if request["input"].as_array().unwrap().iter().any(|t| t.as_str().unwrap().contains("POISON")) {
        let out = r#"{"error": {"message": "input is too large to process"}}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if answer == UNAUTHORIZED {
        let out = r#"{"error": {"message": "Incorrect API key provided"}}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if answer == ECHOING_OK {
        let out = format!(r#"{{"data": "denied for {authorization}"}}"#);
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if answer == ECHOING_UNAUTHORIZED {
        // Far enough into the body that a long key crosses the 200 characters an error keeps.
        let out = format!(
            r#"{{"error": {{"message": "Incorrect API key provided. You can find your API key at https://example.invalid/account/api-keys. You sent: {authorization}"}}}}"#
        );
        let _ = write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if (REDIRECT..SLOW_PER_BYTE).contains(&answer) {
        let _ = write!(
            stream,
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{}/v1/embeddings\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            answer - REDIRECT
        );
        return;
    }
    if (4..BROKEN_OFF).contains(&answer) {
        std::thread::sleep(Duration::from_millis(answer - 4));
    }
    if answer >= SLOW_PER_BYTE {
        let bytes: u64 = request["input"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().len() as u64).sum();
        std::thread::sleep(Duration::from_millis((answer - SLOW_PER_BYTE) * bytes));
    }
    if (SLOW_PER_TEXT..REDIRECT).contains(&answer) {
        let texts = request["input"].as_array().unwrap().len() as u64;
        std::thread::sleep(Duration::from_millis((answer - SLOW_PER_TEXT) * texts));
    }
    let dim = if answer == 1 { DIM / 2 } else { DIM };
    let embedding = |text: &str| -> serde_json::Value {
        let v = hashed(text, dim);
        match answer {
            // Written as JSON numbers: 1e39 is a valid one, beyond f32.
            2 => serde_json::Value::Array(v.iter().map(|x| serde_json::json!(f64::from(*x) * 1e39)).collect()),
            3 => serde_json::json!(vec![0f32; dim]),
            _ => serde_json::json!(v),
        }
    };
    let data: Vec<serde_json::Value> = request["input"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"index": i, "embedding": embedding(t.as_str().unwrap())}))
        .collect();
    let out = serde_json::json!({"object": "list", "data": data, "model": request["model"]}).to_string();
    if answer == BROKEN_OFF {
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            out.len(),
            &out[..out.len() / 2]
        );
        return;
    }
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
        out.len()
    );
}

pub fn openai(path: &Path, stub: &Stub, model: &str, timeout: Duration) -> LocalBackend {
    openai_with_key(path, stub, model, timeout, None)
}

/// An `openai` backend on the stub holding `n` numbered passages, all embedded.
pub async fn embedded_openai(path: &Path, stub: &Stub, timeout: Duration, n: usize) -> LocalBackend {
    let b = openai(path, stub, "hash-64", timeout);
    super::retain(&b, numbered(0, n)).await;
    super::embedded(&b, Duration::from_secs(30)).await;
    b
}

pub fn openai_with_key(path: &Path, stub: &Stub, model: &str, timeout: Duration, key: Option<&str>) -> LocalBackend {
    let api_key = key.map(|k| mneme_core::Secret::new(k.to_owned()));
    let config = OpenAiConfig { url: stub.url(), model: model.into(), api_key, timeout, dim: None };
    LocalBackend::open(&LocalConfig { embedder: EmbedderChoice::OpenAi(config), ..LocalConfig::new(path) }).unwrap()
}

pub fn numbered(from: usize, n: usize) -> Vec<MemoryItem> {
    (from..from + n)
        .map(|i| item(&format!("m{i}"), &format!("note {i} about walrus{i} and the harbour"), &format!("s{i}")))
        .collect()
}
