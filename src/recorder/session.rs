//! One Python process running the recorder's driver: start it, send cells, wait
//! for answers with a deadline, kill it when it does not answer.
//!
//! The driver script (`driver.py`, embedded with `include_str!`) is written to a
//! fresh private temp directory that is removed when the session ends. The child
//! runs with the notebook's directory as its working directory (as a Jupyter
//! kernel does) and with `PYTHONHASHSEED=0`, so set and dict-of-set reprs are the
//! same on every run. Its stdout carries only the protocol; its stderr (C-level
//! output, crash messages) is drained in a thread and kept for error messages.

use super::protocol::{CellResult, Event, Request};
use super::RecordError;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Python side of the recorder.
pub const DRIVER_PY: &str = include_str!("driver.py");

/// How much of the child's stderr is kept for error messages.
const STDERR_TAIL: usize = 8 * 1024;

/// How long the driver may take to say `ready`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of one Python session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The Python interpreter to run.
    pub python: PathBuf,
    /// Working directory of the process (the notebook's directory).
    pub workdir: PathBuf,
    /// Per-cell time limit; `None` waits forever.
    pub timeout: Option<Duration>,
    /// Extra time after the timeout before the process is killed.
    pub kill_grace: Duration,
    /// Longest variable repr kept in snapshots, in characters.
    pub repr_limit: usize,
    /// Most characters of stdout (and of stderr) kept per cell.
    pub output_limit: usize,
}

/// What became of one cell.
#[derive(Debug, Clone, PartialEq)]
pub enum CellOutcome {
    /// The driver answered (the cell may still have raised or been interrupted).
    Finished(Box<CellResult>),
    /// No answer within timeout + grace: the process was killed.
    Killed { elapsed: Duration },
    /// The process exited while running the cell.
    Died { status: String, stderr_tail: String, elapsed: Duration },
}

enum Line {
    Text(String),
    Eof,
    Failed(std::io::Error),
}

/// A private temp directory holding the driver script; removed on drop.
struct DriverDir(PathBuf);

impl DriverDir {
    fn create() -> Result<Self, RecordError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let mut last_err = None;
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("themisto-record-{}-{nanos}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    let script = dir.join("themisto_record_driver.py");
                    let written = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&script)
                        .and_then(|mut f| f.write_all(DRIVER_PY.as_bytes()));
                    let guard = DriverDir(dir);
                    written.map_err(|source| RecordError::DriverFile { path: script.clone(), source })?;
                    return Ok(guard);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(source) => return Err(RecordError::DriverFile { path: dir, source }),
            }
        }
        Err(RecordError::DriverFile {
            path: base,
            source: last_err.unwrap_or_else(|| std::io::Error::other("no free name")),
        })
    }

    fn script(&self) -> PathBuf {
        self.0.join("themisto_record_driver.py")
    }
}

impl Drop for DriverDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running driver process.
pub struct Session {
    config: SessionConfig,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Line>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    python_version: String,
    _driver: DriverDir,
}

impl Session {
    /// Start Python with the driver and wait until it is ready.
    pub fn start(config: &SessionConfig) -> Result<Session, RecordError> {
        let driver = DriverDir::create()?;
        let timeout_s = config.timeout.map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let mut cmd = Command::new(&config.python);
        cmd.arg(driver.script())
            .arg("--timeout")
            .arg(format!("{timeout_s}"))
            .arg("--repr-limit")
            .arg(config.repr_limit.to_string())
            .arg("--output-limit")
            .arg(config.output_limit.to_string())
            .current_dir(&config.workdir)
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONIOENCODING", "utf-8")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if std::env::var_os("MPLBACKEND").is_none() {
            cmd.env("MPLBACKEND", "Agg");
        }
        let mut child = cmd.spawn().map_err(|source| RecordError::Spawn { python: config.python.clone(), source })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || read_lines(stdout, tx));
        }
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = stderr {
            let tail = Arc::clone(&stderr_tail);
            std::thread::spawn(move || drain_stderr(stderr, tail));
        }
        let mut session = Session {
            config: config.clone(),
            child,
            stdin,
            lines,
            stderr_tail,
            python_version: String::new(),
            _driver: driver,
        };
        session.handshake()?;
        Ok(session)
    }

    fn handshake(&mut self) -> Result<(), RecordError> {
        let startup_failed = |s: &mut Session, message: String| {
            s.kill();
            RecordError::DriverStartup { python: s.config.python.clone(), message, stderr: s.stderr_text() }
        };
        match self.lines.recv_timeout(STARTUP_TIMEOUT) {
            Ok(Line::Text(text)) => match serde_json::from_str::<Event>(&text) {
                Ok(Event::Ready { python, .. }) => {
                    self.python_version = python;
                    Ok(())
                }
                _ => Err(startup_failed(self, format!("unexpected first line {text:?}"))),
            },
            Ok(Line::Eof) => {
                // Give the stderr thread a moment to collect the reason.
                let _ = self.wait_exit(Duration::from_secs(2));
                Err(startup_failed(self, "the process exited before it was ready".into()))
            }
            Ok(Line::Failed(e)) => Err(startup_failed(self, format!("reading its stdout: {e}"))),
            Err(_) => Err(startup_failed(self, format!("not ready after {} s", STARTUP_TIMEOUT.as_secs()))),
        }
    }

    /// Python version reported by the driver, e.g. `3.11.7`.
    pub fn python_version(&self) -> &str {
        &self.python_version
    }

    /// The child's stderr so far (the last few KiB), as text.
    pub fn stderr_text(&self) -> String {
        let buf = self.stderr_tail.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Run one cell and wait for its answer, the deadline, or the process's end.
    pub fn run_cell(&mut self, code: &str) -> Result<CellOutcome, RecordError> {
        let started = Instant::now();
        let line = serde_json::to_string(&Request::Run { code })
            .map_err(|e| RecordError::Protocol(format!("cannot encode request: {e}")))?;
        let sent = match self.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{line}").and_then(|()| stdin.flush()).is_ok(),
            None => false,
        };
        if !sent {
            return Ok(self.died(started));
        }
        let deadline = self.config.timeout.map(|t| t + self.config.kill_grace);
        let received = match deadline {
            Some(d) => self.lines.recv_timeout(d),
            None => self.lines.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(Line::Text(text)) => match serde_json::from_str::<Event>(&text) {
                Ok(Event::Result(result)) => Ok(CellOutcome::Finished(result)),
                Ok(Event::Ready { .. }) => Err(RecordError::Protocol("a second `ready` event".into())),
                Err(e) => {
                    Err(RecordError::Protocol(format!("cannot parse the driver's answer ({e}): {}", clip(&text, 300))))
                }
            },
            Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => Ok(self.died(started)),
            Ok(Line::Failed(e)) => Err(RecordError::Protocol(format!("reading the driver's stdout: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                Ok(CellOutcome::Killed { elapsed: started.elapsed() })
            }
        }
    }

    fn died(&mut self, started: Instant) -> CellOutcome {
        let status = match self.wait_exit(Duration::from_secs(5)) {
            Some(s) => describe_status(s),
            None => {
                self.kill();
                "it closed its protocol pipe and was killed".to_string()
            }
        };
        // The stderr thread ends at EOF; a short pause lets it store the last bytes.
        std::thread::sleep(Duration::from_millis(50));
        CellOutcome::Died { status, stderr_tail: self.stderr_text(), elapsed: started.elapsed() }
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    fn kill(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Ask the driver to exit, and kill it if it does not within a few seconds.
    pub fn close(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            if let Ok(line) = serde_json::to_string(&Request::Quit) {
                let _ = writeln!(stdin, "{line}");
            }
        }
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            self.kill();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// Where a session runs, for a notebook at `path`.
pub fn workdir_for(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("killed by signal {sig}");
        }
    }
    status.to_string()
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

fn read_lines(stdout: impl Read, tx: mpsc::Sender<Line>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut buf = String::new();
        let msg = match reader.read_line(&mut buf) {
            Ok(0) => Line::Eof,
            Ok(_) => Line::Text(buf.trim_end_matches(['\n', '\r']).to_string()),
            Err(e) => Line::Failed(e),
        };
        let last = !matches!(msg, Line::Text(_));
        if tx.send(msg).is_err() || last {
            return;
        }
    }
}

fn drain_stderr(mut stderr: impl Read, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    loop {
        match stderr.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Ok(mut buf) = tail.lock() {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > STDERR_TAIL {
                        let cut = buf.len() - STDERR_TAIL;
                        buf.drain(..cut);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workdir_is_the_notebook_directory() {
        assert_eq!(workdir_for(Path::new("a/b/n.ipynb")), PathBuf::from("a/b"));
        assert_eq!(workdir_for(Path::new("n.ipynb")), PathBuf::from("."));
    }

    #[test]
    fn clip_counts_characters_not_bytes() {
        assert_eq!(clip("ééé", 2), "éé...");
        assert_eq!(clip("ab", 5), "ab");
    }
}
