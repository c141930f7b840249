//! The sample explorer of `report.html`: run folders made without a model
//! (hand-written records re-scored by `themisto score`'s library function,
//! prompts in the `themisto prompt --dump` format), the embedded data read
//! back from the page, and the page opened in headless Chromium (when
//! `chromium` is on PATH; skipped with a note otherwise): the explorer lists
//! every sample, `#sample=ID` opens one with its prediction, reference and
//! diff, `#pair=ID` opens a pair, and a screenshot decodes.
//!
//! `explorer_at_protocol_size` (ignored; run it with `--ignored --nocapture`)
//! measures page size and load time at 3 runs × 800 samples.

use crate::common;
use crate::report_support::decode_png;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use themisto::config::ScoreConfig;
use themisto::metrics::MetricOptions;
use themisto::records::score::score_file;
use themisto::report::{write_report, ReportOptions, Samples};

/// A long history output that the fitter shortened, as the prompt shows it.
const PROMPT_BODY: &str = "# (3 earlier cells not shown)\n\n# In[4]:\ndf = load()\n\n# Out[4]:\nrow 1\n...[812 characters cut]...\nrow 99\n\n# In[5]:\n";

/// Hand-written sample records: both tasks, both runtime variants, one
/// skipped, texts with `</script>`, quotes and non-ASCII characters.
fn records(variant: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for step in 5..9 {
        for (task, runtime) in [("next_cell", false), ("next_cell", true), ("output", false), ("output", true)] {
            let id = format!("{task}-{step}-{}", if runtime { "on" } else { "off" });
            let reference = format!("df.groupby('k{step}').mean()  # é");
            let prediction = match (step + variant) % 3 {
                0 => reference.clone(),
                1 => format!("df.groupby('k{step}').sum()  </script> \"x\""),
                _ => format!("print(df.head({step}))"),
            };
            let mut r = json!({
                "id": id, "task": task, "runtime": runtime, "dataset": "fixture", "trajectory": format!("nb{}", step % 2),
                "step": step, "template": format!("{task}.plain.completion.v1"), "prompt_tokens": 400 + step,
                "dropped_steps": 3, "steps_kept": step - 3, "truncated_chars": 812, "runtime_rows_kept": usize::from(runtime) * 4,
                "prediction": prediction, "raw_prediction": format!("{prediction}\n# In[9]:"), "reference": reference,
                "finish_reason": "stop", "generated_tokens": 12, "answer_kind": "answer",
            });
            if step == 8 && task == "output" && runtime {
                r["skipped"] = json!("over_budget");
                r["skip_detail"] = json!("the target code alone is 900 tokens");
                r["prediction"] = json!("");
                r["raw_prediction"] = json!("");
                r["finish_reason"] = Value::Null;
                r["answer_kind"] = Value::Null;
            }
            out.push(r);
        }
    }
    out
}

/// The prompt dump line of a record (what `themisto prompt --dump` writes).
fn prompt_line(r: &Value) -> Value {
    json!({
        "id": r["id"], "task": r["task"], "runtime": r["runtime"], "trajectory": r["trajectory"], "step": r["step"],
        "template": r["template"], "prompt": format!("{PROMPT_BODY}# sample {}\n", r["id"].as_str().unwrap()),
        "prompt_tokens": r["prompt_tokens"], "dropped_steps": r["dropped_steps"], "steps_kept": r["steps_kept"],
        "truncated_chars": r["truncated_chars"], "runtime_rows_kept": r["runtime_rows_kept"],
    })
}

fn write_jsonl(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A run folder made by re-scoring `recs`, with a prompts.jsonl for every
/// record when `prompts`.
pub fn make_run(dir: &Path, name: &str, recs: &[Value], prompts: bool) -> PathBuf {
    let input = dir.join(format!("{name}.jsonl"));
    write_jsonl(&input, recs);
    let out = dir.join(name);
    score_file(&ScoreConfig { samples: input, metrics: MetricOptions::default(), seed: 0 }, &out).unwrap();
    if prompts {
        let lines: Vec<Value> = recs.iter().filter(|r| r.get("skipped").is_none()).map(prompt_line).collect();
        write_jsonl(&out.join("prompts.jsonl"), &lines);
    }
    out
}

/// The explorer data embedded in a page.
fn embedded(html: &str) -> Value {
    let start = "<script type=\"application/json\" id=\"explorer-data\">";
    let from = html.find(start).expect("explorer data") + start.len();
    let to = from + html[from..].find("</script>").unwrap();
    serde_json::from_str(&html[from..to]).unwrap()
}

fn field<'a>(data: &'a Value, sample: &'a Value, name: &str) -> &'a Value {
    let i = data["fields"].as_array().unwrap().iter().position(|f| f == name).unwrap();
    &sample[i]
}

#[test]
fn explorer_embeds_every_sample_with_its_prompt() {
    let dir = common::tempdir();
    let recs = records(0);
    let run = make_run(dir.path(), "a", &recs, true);
    let out = dir.path().join("rep");
    let done = write_report(std::slice::from_ref(&run), &out, &ReportOptions::default()).unwrap();
    let e = done.explorer.expect("a one-run report has the explorer");
    assert_eq!((e.samples, e.with_prompt, e.paired), (recs.len(), recs.len() - 1, true));
    let html = std::fs::read_to_string(&done.html).unwrap();
    // Two script elements (data, code); the predictions' `</script>` cannot end one.
    assert_eq!(html.matches("<script").count(), 2);
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(html.contains("id=\"paired\""));
    let data = embedded(&html);
    let strings: Vec<&str> = data["strings"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let samples = data["samples"].as_array().unwrap();
    assert_eq!(samples.len(), recs.len());
    for (s, r) in samples.iter().zip(&recs) {
        assert_eq!(field(&data, s, "id"), &r["id"]);
        let text = |f: &str| field(&data, s, f).as_u64().map(|i| strings[i as usize]);
        assert_eq!(text("prediction"), r["prediction"].as_str());
        assert_eq!(text("reference"), r["reference"].as_str());
        if r.get("skipped").is_some() {
            assert_eq!(text("prompt"), None);
            assert!(field(&data, s, "prompt_note").as_str().unwrap().starts_with("skipped (over_budget)"));
        } else {
            assert!(text("prompt").unwrap().contains("...[812 characters cut]..."));
        }
    }
    // A dump of another fit is not shown as the prompt; no dump says how to make one.
    let other = dir.path().join("other.jsonl");
    let shifted: Vec<Value> = recs
        .iter()
        .map(|r| {
            let mut p = prompt_line(r);
            p["prompt_tokens"] = json!(1);
            p
        })
        .collect();
    write_jsonl(&other, &shifted);
    let bare = make_run(dir.path(), "b", &recs, false);
    let opts = ReportOptions { prompts: vec![other], ..Default::default() };
    let done = write_report(std::slice::from_ref(&bare), &dir.path().join("rep2"), &opts).unwrap();
    assert_eq!(done.explorer.unwrap().with_prompt, 0);
    let data = embedded(&std::fs::read_to_string(&done.html).unwrap());
    assert!(field(&data, &data["samples"][0], "prompt_note").as_str().unwrap().contains("was fitted differently"));
    let done = write_report(&[bare], &dir.path().join("rep3"), &ReportOptions::default()).unwrap();
    let data = embedded(&std::fs::read_to_string(&done.html).unwrap());
    assert!(field(&data, &data["samples"][0], "prompt_note").as_str().unwrap().starts_with("prompt not recorded"));
    // Over two runs only when asked.
    let three = [run.clone(), run.clone(), run.clone()];
    let done = write_report(&three, &dir.path().join("rep4"), &ReportOptions::default()).unwrap();
    assert!(done.explorer.is_none() && !std::fs::read_to_string(&done.html).unwrap().contains("explorer-data"));
    let opts = ReportOptions { samples: Samples::Always, ..Default::default() };
    let done = write_report(&three, &dir.path().join("rep5"), &opts).unwrap();
    assert_eq!(done.explorer.unwrap().samples, 3 * recs.len());
}

/// Chromium on PATH, if any.
fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(String::from)
}

/// Run headless Chromium on `url` with `extra` arguments; returns stdout.
fn headless(browser: &str, url: &str, extra: &[&str]) -> String {
    let profile = common::tempdir();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Text as Chromium's `--dump-dom` writes it in an element.
fn dom_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The element of the DOM with this id, up to its first `</div>` (enough
/// for the `<pre>` inside).
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id}"));
    &dom[at..at + dom[at..].find("</div>").unwrap()]
}

#[test]
fn explorer_in_headless_chromium() {
    let Some(browser) = chromium() else {
        common::skip("chromium is not on PATH (apt-get install chromium)");
        return;
    };
    let dir = common::tempdir();
    let (ra, rb) = (records(0), records(1));
    let a = make_run(dir.path(), "a", &ra, true);
    let b = make_run(dir.path(), "b", &rb, false);
    let out = dir.path().join("rep");
    let done = write_report(&[a, b], &out, &ReportOptions::default()).unwrap();
    let page = format!("file://{}", done.html.display());
    let pick = &rb[5];
    let id = pick["id"].as_str().unwrap();
    let dom = headless(&browser, &format!("{page}#sample={id}&run=1"), &["--dump-dom"]);
    assert!(dom.contains("data-ready=\"1\""), "the script ran:\n{}", &dom[..dom.len().min(3000)]);
    let n = ra.len() + rb.len();
    assert!(dom.contains(&format!("data-rows=\"{n}\"")), "all {n} samples listed");
    let table = &dom[dom.find("id=\"explorer-table\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(table.matches("<tr data-i=").count(), n);
    for r in ra.iter().chain(&rb) {
        assert!(table.contains(&format!("<td>{}</td>", r["id"].as_str().unwrap())));
    }
    assert!(dom.contains(&format!("data-open=\"{id}\"")), "#sample= opened the sample");
    let pred = element(&dom, "sv-prediction");
    assert!(pred.contains(&dom_text(pick["prediction"].as_str().unwrap())), "{pred}");
    let refer = element(&dom, "sv-reference");
    assert!(refer.contains(&dom_text(pick["reference"].as_str().unwrap())), "{refer}");
    assert!(dom.contains("Diff of the prediction against the reference (character level"));
    assert!(dom.contains("<del>um</del>") || dom.contains("<del>mean</del>") || dom.contains("<ins>"), "a diff");
    assert!(dom.contains("prompt not recorded"), "run b has no prompts");
    // The paired view: the two runs share every id.
    assert!(dom.contains(&format!("id=\"paired-table\" data-rows=\"{}\"", ra.len())));
    let dom = headless(&browser, &format!("{page}#sample={}&run=0", ra[1]["id"].as_str().unwrap()), &["--dump-dom"]);
    assert!(dom.contains("<mark>...[812 characters cut]...</mark>") && dom.contains("3 earlier steps dropped"));
    let dom = headless(&browser, &format!("{page}#pair={id}"), &["--dump-dom"]);
    assert!(dom.contains(&format!("id=\"pair-view\" data-open=\"{id}\"")), "#pair= opened the pair");
    // A screenshot.
    let shot = out.join("explorer.png");
    headless(
        &browser,
        &format!("{page}#sample={id}&run=1&view=samples"),
        &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1600"],
    );
    let png = decode_png(&std::fs::read(&shot).expect("a screenshot")).unwrap();
    assert_eq!((png.width, png.height), (1280, 1600));
    // Not a blank page: dark text pixels and coloured marks of the diff.
    let px: Vec<&[u8]> = png.pixels.chunks(png.channels).collect();
    let dark = px.iter().filter(|p| p[..3].iter().all(|c| *c < 90)).count();
    assert!(dark > 5000, "text drawn ({dark} dark pixels)");
}

/// Base records for the size test: a real run's (`THEMISTO_EXPLORER_BASE`,
/// with its prompts.jsonl if any), else the hand-written ones.
fn base_records() -> (Vec<Value>, Vec<Value>) {
    let read = |p: PathBuf| -> Vec<Value> {
        std::fs::read_to_string(p).map_or(Vec::new(), |t| t.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
    };
    match std::env::var_os("THEMISTO_EXPLORER_BASE") {
        Some(d) => (read(Path::new(&d).join("samples.jsonl")), read(Path::new(&d).join("prompts.jsonl"))),
        None => {
            let r = records(0);
            let p = r.iter().map(prompt_line).collect();
            (r, p)
        }
    }
}

#[test]
#[ignore = "measures page size and load time at protocol size (3 runs × 800 samples); needs chromium"]
fn explorer_at_protocol_size() {
    let (base, base_prompts) = base_records();
    let dir = common::tempdir();
    let mut runs = Vec::new();
    for run in 0..3 {
        let mut recs = Vec::new();
        let mut prompts = Vec::new();
        for i in 0..800 {
            let mut r = base[i % base.len()].clone();
            let id = format!("{:016x}", i * 7919 + 1);
            r["id"] = json!(id);
            r["step"] = json!(i / 4);
            let pred = format!("{} # variant {}", r["prediction"].as_str().unwrap(), (i + run) % 5);
            r["prediction"] = json!(pred);
            if let Some(p) = base_prompts.iter().find(|p| p["id"] == base[i % base.len()]["id"]) {
                let mut p = p.clone();
                p["id"] = json!(id);
                p["prompt"] = json!(format!("{}\n# sample {i} of run {run}", p["prompt"].as_str().unwrap()));
                prompts.push(p);
            }
            recs.push(r);
        }
        let folder = make_run(dir.path(), &format!("run{run}"), &recs, false);
        write_jsonl(&folder.join("prompts.jsonl"), &prompts);
        runs.push(folder);
    }
    let out = dir.path().join("rep");
    let opts = ReportOptions { samples: Samples::Always, ..Default::default() };
    let t = Instant::now();
    let done = write_report(&runs, &out, &opts).unwrap();
    let write_s = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&done.html).unwrap().len();
    if let Some(keep) = std::env::var_os("THEMISTO_EXPLORER_KEEP") {
        std::fs::copy(&done.html, keep).unwrap();
    }
    println!("report.html: {:.2} MB, written in {write_s:.2} s ({:?})", size as f64 / 1e6, done.explorer);
    let Some(browser) = chromium() else {
        common::skip("chromium is not on PATH, so the report's load time is not measured (apt-get install chromium)");
        return;
    };
    let blank = out.join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><p>x</p>").unwrap();
    for (name, page) in [("blank page", blank), ("report", done.html.clone())] {
        let t = Instant::now();
        let dom =
            headless(&browser, &format!("file://{}#sample=0000000000000001&run=2", page.display()), &["--dump-dom"]);
        let wall = t.elapsed().as_secs_f64();
        let attr =
            |a: &str| dom.split(&format!("{a}=\"")).nth(1).and_then(|s| s.split('"').next()).unwrap_or("-").to_string();
        println!(
            "{name}: headless chromium --dump-dom {wall:.2} s wall; explorer script {} ms, with the first layout {} ms",
            attr("data-init-ms"),
            attr("data-layout-ms")
        );
        if name == "report" {
            assert!(dom.contains("data-rows=\"2400\""));
        }
    }
}
