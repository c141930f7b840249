//! The hub as users reach it, against a hub served on 127.0.0.1 by the test
//! itself: the revision API (`/api/models/{repo}/revision/{rev}`, siblings and
//! commit) and file downloads (`/{repo}/resolve/{rev}/{file}` with `etag`,
//! `x-repo-commit`, `Content-Range` and `Range` support). One repository is
//! gated (401 without the token), the first full download of a weights file
//! is cut off half way, and some files of the broken repositories answer 500.
//! Everything goes through the binary with `HF_ENDPOINT`, `HF_TOKEN` or the
//! token file `$HF_HOME/token`, and `HF_HUB_OFFLINE`.

use crate::common;
use crate::safetensors::write_checkpoint;
use common::{write_tiny_gguf, TinySpec};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use themisto::util::sha256_file;

const TOKEN: &str = "hf_local_test_token";
const COMMIT: &str = "1111111111111111111111111111111111111111";

/// One repository of the local hub.
#[derive(Default)]
struct Repo {
    files: BTreeMap<String, Vec<u8>>,
    gated: bool,
    /// Files answered with 500 (listed all the same).
    failing: Vec<String>,
}

/// What the server saw: one line per request (`METHOD PATH | range | auth`).
#[derive(Default)]
struct Log {
    requests: Vec<String>,
    /// Files whose first full download is cut off half way, until it happened.
    drop_once: Vec<String>,
}

struct Hub {
    endpoint: String,
    log: Arc<Mutex<Log>>,
}

impl Hub {
    fn start(repos: BTreeMap<String, Repo>, drop_once: &[&str]) -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Log {
            requests: Vec::new(),
            drop_once: drop_once.iter().map(|s| s.to_string()).collect(),
        }));
        let repos = Arc::new(repos);
        let server_log = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (repos, log) = (repos.clone(), server_log.clone());
                std::thread::spawn(move || serve(stream, &repos, &log));
            }
        });
        Hub { endpoint, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().requests.clone()
    }
}

/// Answer one connection (one request; `Connection: close`).
fn serve(stream: TcpStream, repos: &BTreeMap<String, Repo>, log: &Mutex<Log>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned().unwrap_or_default();
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    log.lock().unwrap().requests.push(format!("{method} {path} | {range} | {auth}"));
    let mut out = stream;
    let reply = |out: &mut TcpStream, status: &str, extra: &[(String, String)], body: &[u8]| {
        let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = out.write_all(head.as_bytes());
        let _ = out.write_all(body);
    };
    // /api/models/{owner}/{name}/revision/{rev}
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let segs: Vec<&str> = rest.split('/').collect();
        let repo_id = segs.iter().take(2).copied().collect::<Vec<_>>().join("/");
        let Some(repo) = repos.get(&repo_id) else { return reply(&mut out, "404 Not Found", &[], b"{}") };
        if repo.gated && auth != format!("Bearer {TOKEN}") {
            return reply(&mut out, "401 Unauthorized", &[], b"{\"error\":\"gated\"}");
        }
        let siblings: Vec<serde_json::Value> =
            repo.files.keys().map(|f| serde_json::json!({ "rfilename": f })).collect();
        let body = serde_json::json!({ "id": repo_id, "sha": COMMIT, "siblings": siblings }).to_string();
        return reply(&mut out, "200 OK", &[("Content-Type".into(), "application/json".into())], body.as_bytes());
    }
    // /{owner}/{name}/resolve/{rev}/{file}
    let segs: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    if segs.len() != 5 || segs[2] != "resolve" {
        return reply(&mut out, "404 Not Found", &[], b"");
    }
    let repo_id = format!("{}/{}", segs[0], segs[1]);
    let file = segs[4].to_string();
    let Some(repo) = repos.get(&repo_id) else { return reply(&mut out, "404 Not Found", &[], b"") };
    if repo.gated && auth != format!("Bearer {TOKEN}") {
        return reply(&mut out, "401 Unauthorized", &[], b"gated repository");
    }
    if repo.failing.contains(&file) {
        return reply(&mut out, "500 Internal Server Error", &[], b"broken");
    }
    let Some(data) = repo.files.get(&file) else {
        return reply(&mut out, "404 Not Found", &[("X-Error-Code".into(), "EntryNotFound".into())], b"");
    };
    let sha = themisto::util::sha256_hex(data);
    let len = data.len();
    let start: usize = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
        .min(len);
    let end = match range.strip_prefix("bytes=").and_then(|r| r.split('-').nth(1)) {
        Some(e) if !e.is_empty() => e.parse::<usize>().unwrap_or(len - 1).min(len - 1),
        _ => len - 1,
    };
    let body = &data[start..=end];
    let headers = vec![
        ("ETag".to_string(), format!("\"{sha}\"")),
        ("x-repo-commit".to_string(), COMMIT.to_string()),
        ("Accept-Ranges".to_string(), "bytes".to_string()),
        ("Content-Range".to_string(), format!("bytes {start}-{end}/{len}")),
    ];
    let cut = start == 0 && end == len - 1 && {
        let mut l = log.lock().unwrap();
        let hit = l.drop_once.iter().position(|f| *f == file);
        hit.map(|i| l.drop_once.remove(i)).is_some()
    };
    if cut {
        // Promise the whole body, send half, close.
        let mut head =
            format!("HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = out.write_all(head.as_bytes());
        let _ = out.write_all(&body[..body.len() / 2]);
        let _ = out.flush();
        let _ = out.shutdown(std::net::Shutdown::Both);
        return;
    }
    reply(&mut out, "206 Partial Content", &headers, body)
}

fn read_folder(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

/// The binary with a clean hub environment: `HF_HOME` in `home`, themisto's cache beside it.
fn themisto(home: &Path, endpoint: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    for k in ["HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "XDG_CACHE_HOME"] {
        c.env_remove(k);
    }
    c.env("HF_HOME", home.join("hf")).env("THEMISTO_HOME", home.join("themisto")).env("HF_ENDPOINT", endpoint);
    c
}

fn output(c: &mut Command) -> (i32, String, String) {
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

#[test]
fn gated_gguf_needs_the_token_resumes_a_dropped_download_and_works_offline() {
    let tmp = common::tempdir();
    let gguf = tmp.path().join("tiny.gguf");
    write_tiny_gguf(&gguf, &TinySpec::default());
    let data = std::fs::read(&gguf).unwrap();
    let sha = sha256_file(&gguf).unwrap();
    let mut repos = BTreeMap::new();
    repos.insert(
        "local-org/gated-gguf".to_string(),
        Repo { files: [("tiny.gguf".to_string(), data.clone())].into(), gated: true, failing: vec![] },
    );
    let hub = Hub::start(repos, &["tiny.gguf"]);
    let card = tmp.path().join("gated.toml");
    std::fs::write(
        &card,
        format!(
            "id = \"gated-tiny\"\narchitecture = \"llama\"\ncontext_length = 512\n\
             [[files]]\nname = \"tiny.gguf\"\nsha256 = \"{sha}\"\n\
             [[sources]]\nkind = \"hub\"\nrepo = \"local-org/gated-gguf\"\n"
        ),
    )
    .unwrap();
    let card = card.to_str().unwrap();

    // No token: refused, the error says why, model problem (exit 3).
    let (code, _, err) = output(themisto(tmp.path(), &hub.endpoint).args(["models", "fetch", card]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("401") && err.contains("gated") && err.contains("HF_TOKEN"), "{err}");
    assert!(hub.requests().iter().all(|r| r.ends_with("| ")), "no token was sent: {:?}", hub.requests());

    // HF_TOKEN: sent, the cut download resumed from where it stopped, sha256 checked.
    let (code, out, err) =
        output(themisto(tmp.path(), &hub.endpoint).env("HF_TOKEN", TOKEN).args(["models", "fetch", card]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&sha) && out.contains("gated-tiny ready"), "{out}");
    let reqs = hub.requests();
    let file_reqs: Vec<&String> = reqs.iter().filter(|r| r.contains("/resolve/main/tiny.gguf")).collect();
    assert!(file_reqs.iter().filter(|r| r.contains("Bearer")).all(|r| r.ends_with(&format!("Bearer {TOKEN}"))));
    let half = data.len() / 2;
    assert!(
        file_reqs.iter().any(|r| r.contains(&format!("| bytes={half}- |"))),
        "the download was not resumed at byte {half}: {file_reqs:?}"
    );
    let cached = tmp.path().join("hf/hub/models--local-org--gated-gguf/snapshots").join(COMMIT).join("tiny.gguf");
    assert_eq!(sha256_file(&cached).unwrap(), sha);

    // Offline: the cache serves it and nothing is asked of the network.
    let before = hub.requests().len();
    let (code, out, err) =
        output(themisto(tmp.path(), "http://127.0.0.1:9").env("HF_HUB_OFFLINE", "1").args(["models", "fetch", card]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(hub cache)"), "{out}");
    // Offline and not cached: refused without a request.
    let other = tmp.path().join("other.toml");
    let text =
        std::fs::read_to_string(card).unwrap().replace("gated-tiny", "other-tiny").replace("gated-gguf", "other");
    std::fs::write(&other, text).unwrap();
    let (code, _, err) = output(themisto(tmp.path(), &hub.endpoint).env("HF_HUB_OFFLINE", "1").args([
        "models",
        "fetch",
        other.to_str().unwrap(),
    ]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
    assert_eq!(hub.requests().len(), before, "offline runs made requests");
}

#[test]
fn checkpoints_take_the_token_file_report_absent_files_and_fail_on_failed_downloads() {
    let tmp = common::tempdir();
    let src = tmp.path().join("ckpt");
    write_checkpoint(&src, "llama", false, 5);
    std::fs::remove_file(src.join("generation_config.json")).unwrap();
    let files = read_folder(&src);
    let mut sharded_files = files.clone();
    sharded_files.insert("model.safetensors.index.json".into(), b"{}".to_vec());
    let mut repos = BTreeMap::new();
    repos.insert("local-org/ckpt".to_string(), Repo { files: files.clone(), gated: true, failing: vec![] });
    repos.insert(
        "local-org/broken-config".to_string(),
        Repo { files: files.clone(), gated: false, failing: vec!["tokenizer_config.json".into()] },
    );
    repos.insert(
        "local-org/broken-index".to_string(),
        Repo { files: sharded_files, gated: false, failing: vec!["model.safetensors.index.json".into()] },
    );
    let hub = Hub::start(repos, &["model.safetensors"]);
    std::fs::create_dir_all(tmp.path().join("hf")).unwrap();
    std::fs::write(tmp.path().join("hf/token"), format!("{TOKEN}\n")).unwrap();

    // The token file is read; generation_config.json is not in the repo: allowed, reported.
    let out_dir = tmp.path().join("run");
    let (code, _, err) = output(themisto(tmp.path(), &hub.endpoint).args([
        "run",
        "--model",
        "hf://local-org/ckpt",
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--threads",
        "1",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("has no generation_config.json"), "{err}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["model"]["absent_files"], serde_json::json!(["generation_config.json"]), "{results}");
    let weights = results["model"]["files"].as_array().unwrap().iter().find(|f| f["name"] == "model.safetensors");
    assert_eq!(weights.unwrap()["sha256"], sha256_file(&src.join("model.safetensors")).unwrap().as_str());
    let reqs = hub.requests();
    assert!(reqs.iter().all(|r| r.ends_with(&format!("Bearer {TOKEN}"))), "{reqs:?}");
    assert!(reqs.iter().any(|r| r.contains("/resolve/main/model.safetensors | bytes=") && !r.contains("bytes=0-")));
    assert!(!reqs.iter().any(|r| r.contains("generation_config.json")), "absent files are not requested: {reqs:?}");

    // A listed tokenizer_config.json that fails to download is an error, not skipped.
    let (code, _, err) =
        output(themisto(tmp.path(), &hub.endpoint).args(["models", "fetch", "hf://local-org/broken-config"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("tokenizer_config.json") && err.contains("500"), "{err}");

    // A listed shard index that fails is the error; model.safetensors is not tried instead.
    let (code, _, err) =
        output(themisto(tmp.path(), &hub.endpoint).args(["models", "fetch", "hf://local-org/broken-index"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("model.safetensors.index.json") && err.contains("500"), "{err}");
    let reqs = hub.requests();
    assert!(!reqs.iter().any(|r| r.contains("broken-index/resolve/main/model.safetensors |")), "{reqs:?}");
}
