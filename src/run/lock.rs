//! One writer per folder: a run (or sweep) holds an exclusive lock on the
//! file `.themisto.lock` in its folder while it writes there, and writes its
//! process id into it. A second `run`, `sweep` or `--resume` on the folder is
//! refused at once, naming that pid. The lock is the operating system's
//! (`flock` on Unix, taken with [`std::fs::File::try_lock`]), so it ends with
//! the process that holds it, however that ends: a lock file left by a
//! killed process holds no lock, and the next run takes it over. The file
//! itself stays (removing it could let two processes lock two different
//! files of the same name).

use super::{io_err, RunError};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The lock file's name inside a run or sweep folder.
pub const LOCK_FILE: &str = ".themisto.lock";

/// A held folder lock; dropping it releases the lock.
#[derive(Debug)]
pub struct FolderLock {
    _file: File,
}

/// Lock `folder` (which must exist) for this process, or refuse with the
/// pid of the process that holds it.
pub fn lock(folder: &Path) -> Result<FolderLock, RunError> {
    let path = folder.join(LOCK_FILE);
    let mut file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io_err(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.trim();
            let holder = if pid.is_empty() { "pid unknown".to_string() } else { format!("pid {pid}") };
            return Err(RunError::Config(format!(
                "{} is being written by another themisto process ({holder}, holding {}); wait for it to finish or stop it, then run again",
                folder.display(),
                path.display()
            )));
        }
        Err(TryLockError::Error(e)) => return Err(io_err(&path)(e)),
    }
    file.set_len(0).map_err(io_err(&path))?;
    file.rewind().map_err(io_err(&path))?;
    writeln!(file, "{}", std::process::id()).and_then(|()| file.flush()).map_err(io_err(&path))?;
    Ok(FolderLock { _file: file })
}

/// Lock `folder` if it holds one of `markers` already (`config.json` of a
/// run, `sweep.json` of a sweep): a check before a model loads, so a busy
/// folder is refused at once. `None` otherwise: a new folder is locked once
/// it is made, and a folder of something else gets no lock file.
pub fn lock_existing(folder: &Path, markers: &[&str]) -> Result<Option<FolderLock>, RunError> {
    if markers.iter().any(|m| folder.join(m).exists()) {
        lock(folder).map(Some)
    } else {
        Ok(None)
    }
}

/// `--out` must be a folder (or not exist yet), not a file.
pub fn check_out(out: &Path) -> Result<(), RunError> {
    if out.exists() && !out.is_dir() {
        return Err(RunError::Config(format!("--out {} is a file, not a folder", out.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{lock, LOCK_FILE};

    #[test]
    fn a_held_lock_refuses_a_second_with_the_pid_and_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        let err = lock(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(held);
        // A lock file whose holder is gone is taken over.
        std::fs::write(dir.path().join(LOCK_FILE), "999999999\n").unwrap();
        let _again = lock(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
    }
}
