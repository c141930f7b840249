//! `themisto report` over a sweep made with the tiny in-test model: the plots
//! (well-formed SVG with the expected axis labels and series, PNG that
//! decodes to a 1200×460 picture with content), the tables (the numbers of
//! the results files), a standalone HTML page; and the paired bootstrap on
//! hand-made records.

use crate::common;
use crate::report_support;

use clap::Parser;
use report_support::{check_xml, decode_png, inflate};
use std::path::{Path, PathBuf};
use themisto::cli::{Cli, Command};
use themisto::model::source::FetchOptions;
use themisto::records::{read_samples, ResultsFile, SampleRecord};
use themisto::report::paired::compare;
use themisto::report::table::ci;
use themisto::report::{write_report, ReportOptions};
use themisto::sweep::{sweep, SweepOptions};

/// A two-budget sweep of the tiny model, two samples per group, with the
/// independent fitting: the random model's answers (and so the spread of
/// scores the plots are checked for) depend on the prompts.
fn make_sweep(dir: &Path) -> PathBuf {
    let model = dir.join("tiny.gguf");
    common::write_tiny_gguf(&model, &common::TinySpec { context: 2048, ..Default::default() });
    let out = dir.join("sweep");
    let argv = [
        "themisto",
        "sweep",
        "--model",
        model.to_str().unwrap(),
        "--context-tokens",
        "512,1024",
        "--limit",
        "2",
        "--max-new-tokens",
        "8",
        "--fit",
        "independent",
        "--out",
        "x",
    ];
    let cfg = match Cli::try_parse_from(argv).unwrap().command {
        Command::Sweep(a) => a.config().unwrap(),
        other => panic!("{other:?}"),
    };
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    sweep(
        &cfg,
        &SweepOptions { out: out.clone(), progress: false, fetch, after_run: Some(themisto::cli::write_report_md) },
    )
    .unwrap();
    out
}

fn results(dir: &Path) -> ResultsFile {
    serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap()
}

#[test]
fn report_on_a_sweep_has_plots_tables_and_a_standalone_page() {
    let dir = common::tempdir();
    let sweep_dir = make_sweep(dir.path());
    let out = dir.path().join("report");
    let done = write_report(std::slice::from_ref(&sweep_dir), &out, &ReportOptions::default()).unwrap();
    assert_eq!((done.runs, done.unfinished), (2, 0));

    // Plots: four figures, SVG and PNG each.
    let stems = ["exact_match", "rouge_l", "chrf", "steps_kept"];
    let expected: Vec<PathBuf> =
        stems.iter().flat_map(|s| ["svg", "png"].map(|e| out.join("plots").join(format!("{s}.{e}")))).collect();
    assert_eq!(done.plots, expected);
    let y_desc = ["exact match", "ROUGE-L (F)", "chrF", "mean steps kept"];
    for (stem, y) in stems.iter().zip(y_desc) {
        let svg = std::fs::read_to_string(out.join("plots").join(format!("{stem}.svg"))).unwrap();
        let names = check_xml(&svg).unwrap_or_else(|e| panic!("{stem}.svg: {e}"));
        assert_eq!(names[0], "svg");
        // plotters writes each label as `<text ...>\nLABEL\n</text>`.
        for text in
            ["context tokens", y, "next_cell", "output", "512", "1024", "tiny · runtime on", "tiny · runtime off"]
        {
            let element = format!(">\n{text}\n</text>");
            assert!(svg.contains(&element), "{stem}.svg lacks {element:?}");
        }
        // Metric plots shade the intervals that have a width; the steps plot has none.
        let widths =
            [512, 1024].iter().flat_map(|b| results(&sweep_dir.join(format!("tiny/ctx-{b}"))).groups).any(|g| {
                let m = &g.metrics;
                let v = match *stem {
                    "exact_match" => m.exact_match,
                    "rouge_l" => m.rouge_l,
                    "chrf" => m.chrf,
                    _ => return false,
                };
                v.ci_low != v.ci_high
            });
        assert_eq!(svg.contains("<polygon"), widths, "{stem}");
        if *stem == "chrf" {
            assert!(widths, "chrF differs between two samples of a group");
        }

        let png = decode_png(&std::fs::read(out.join("plots").join(format!("{stem}.png"))).unwrap())
            .unwrap_or_else(|e| panic!("{stem}.png: {e}"));
        assert_eq!((png.width, png.height), (1200, 460), "{stem}.png");
        let px: Vec<&[u8]> = png.pixels.chunks(png.channels).collect();
        let white = px.iter().filter(|p| p[..3].iter().all(|c| *c == 255)).count();
        let dark = px.iter().filter(|p| p[..3].iter().all(|c| *c < 90)).count();
        let mut colours: Vec<&[u8]> = px.clone();
        colours.sort();
        colours.dedup();
        assert!(white > px.len() / 2, "{stem}.png: mostly white background ({white})");
        assert!(dark > 2000, "{stem}.png: text and axes drawn ({dark} dark pixels)");
        assert!(colours.len() > 30, "{stem}.png: anti-aliased text and coloured lines ({} colours)", colours.len());
        let mut broken = std::fs::read(out.join("plots").join(format!("{stem}.png"))).unwrap();
        let mid = broken.len() / 2;
        broken[mid] ^= 0x40;
        assert!(decode_png(&broken).is_err(), "the decoder notices a flipped bit");
    }

    // Tables: every group of every run, with the numbers of its results file.
    let md = std::fs::read_to_string(&done.markdown).unwrap();
    let html = std::fs::read_to_string(&done.html).unwrap();
    for budget in [512, 1024] {
        let r = results(&sweep_dir.join(format!("tiny/ctx-{budget}")));
        assert_eq!(r.groups.len(), 4);
        // Each run's own report.md says where and how it ran.
        let run_md = std::fs::read_to_string(sweep_dir.join(format!("tiny/ctx-{budget}/report.md"))).unwrap();
        let engine = &r.model.as_ref().unwrap().engine;
        assert!(run_md.contains(&format!("- ran on: cpu with the {engine} engine (weights ")), "{run_md}");
        for g in &r.groups {
            let m = &g.metrics;
            let cells = [
                "tiny".to_string(),
                (if g.runtime { "on" } else { "off" }).to_string(),
                budget.to_string(),
                g.n.to_string(),
                g.skipped.to_string(),
                ci(&m.exact_match, 1.0, 3),
                ci(&m.rouge_l, 1.0, 3),
                ci(&m.chrf, 1.0, 2),
                format!("{:.2}", m.chrf_corpus),
                format!("{:.2}", g.mean_steps_kept),
                format!("{:.0}", g.mean_prompt_tokens),
            ];
            let row = format!("| {} |", cells.join(" | "));
            assert!(md.contains(&row), "report.md lacks {row}\n{md}");
            let cell_html: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if [2, 3, 4, 8, 9, 10].contains(&i) {
                        format!("<td class=\"num\">{c}</td>")
                    } else {
                        format!("<td>{c}</td>")
                    }
                })
                .collect();
            let row_html = format!("<tr>{}</tr>", cell_html.concat());
            assert!(html.contains(&row_html), "report.html lacks {row_html}");
        }
    }
    for section in [
        "## Runs",
        "## Results: next_cell",
        "## Results: output",
        "## Plots",
        "## Paired comparison",
        "![chrF against the context budget](plots/chrf.svg)",
    ] {
        assert!(md.contains(section), "report.md lacks {section}");
    }

    // The page stands alone: plots inline, nothing fetched; its only scripts
    // are the explorer's inline data and code (the data, which holds model
    // output, left out of the check).
    let data_start = html.find("<script type=\"application/json\" id=\"explorer-data\">").expect("explorer data");
    let data_end = data_start + html[data_start..].find("</script>").unwrap();
    let page = format!("{}{}", &html[..data_start], &html[data_end..]);
    assert!(!page.contains("http://") && !page.contains("https://"));
    for tag in ["<img", "<link", "<iframe", " src=", "url(", "fetch(", "XMLHttpRequest", "import("] {
        assert!(!page.contains(tag), "report.html has {tag}");
    }
    assert_eq!(page.matches("<script").count(), 1, "one inline script besides the data");
    assert!(page.contains("<script>\n"));
    assert!(html.contains("<style>") && html.matches("<table>").count() >= 4);
    let svgs: Vec<&str> = html.split("<svg").skip(1).map(|s| s.split("</svg>").next().unwrap()).collect();
    assert_eq!(svgs.len(), 4);
    for s in svgs {
        check_xml(&format!("<svg{s}</svg>")).unwrap();
    }

    // Two runs: the paired comparison pairs every sample scored in both.
    let cmp = done.comparison.expect("two runs give a comparison");
    assert_eq!(cmp.len(), 4);
    let a = read_samples(&sweep_dir.join("tiny/ctx-512/samples.jsonl")).unwrap();
    let b = read_samples(&sweep_dir.join("tiny/ctx-1024/samples.jsonl")).unwrap();
    for g in &cmp {
        let scored = |recs: &[SampleRecord], id: &str| {
            recs.iter().any(|r| r.id == id && r.scores.is_some() && r.skipped.is_none())
        };
        let both = a
            .iter()
            .filter(|r| r.task == g.task && r.runtime == g.runtime && scored(&a, &r.id) && scored(&b, &r.id))
            .count();
        assert_eq!(g.n_paired, both);
        assert!(g.chrf.ci_low <= g.chrf.mean_diff && g.chrf.mean_diff <= g.chrf.ci_high);
        assert!(g.chrf.p_value > 0.0 && g.chrf.p_value <= 1.0);
    }
}

#[test]
fn same_run_twice_is_labelled_apart_and_does_not_differ() {
    let dir = common::tempdir();
    let sweep_dir = make_sweep(dir.path());
    let run = sweep_dir.join("tiny/ctx-512");
    let groups = results(&run).groups;
    let done =
        write_report(&[run.clone(), run], &dir.path().join("r"), &ReportOptions { seed: 4, ..Default::default() })
            .unwrap();
    assert_eq!(done.runs, 2);
    let cmp = done.comparison.unwrap();
    // Every group has a row; its pairs are its scored samples (none where
    // all were over the budget).
    assert_eq!(
        cmp.iter().map(|g| (g.task, g.runtime, g.n_paired)).collect::<Vec<_>>(),
        groups.iter().map(|g| (g.task, g.runtime, g.n)).collect::<Vec<_>>()
    );
    assert!(cmp.iter().any(|g| g.n_paired > 0));
    for g in &cmp {
        assert_eq!((g.only_a, g.only_b), (0, 0));
        for d in [g.exact_match, g.rouge_l, g.chrf] {
            assert_eq!((d.mean_diff, d.ci_low, d.ci_high, d.p_value), (0.0, 0.0, 0.0, 1.0));
        }
    }
    let md = std::fs::read_to_string(&done.markdown).unwrap();
    // Same model and budget twice: the input folder's name, then a number, tell them apart.
    assert!(md.contains("| tiny (ctx-512) #1 · ctx 512 |") && md.contains("| tiny (ctx-512) #2 · ctx 512 |"), "{md}");
    assert!(md.contains("| +0.000 [+0.000, +0.000] | 1.0000 |"), "{md}");

    // The command line: the sweep folder in, the files named on stdout.
    let out = dir.path().join("cli");
    let ran = std::process::Command::new(env!("CARGO_BIN_EXE_themisto"))
        .args(["report", sweep_dir.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(stdout.starts_with("2 runs reported\n"), "{stdout}");
    assert!(stdout.contains(&format!("html: {}", out.join("report.html").display())), "{stdout}");
    assert_eq!(stdout.matches("plot: ").count(), 8, "{stdout}");
}

#[test]
fn cli_report_names_bad_inputs() {
    let dir = common::tempdir();
    let bin = env!("CARGO_BIN_EXE_themisto");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = std::process::Command::new(bin)
        .args(["report", empty.to_str().unwrap(), "--out", dir.path().join("r").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is neither a run folder (results.json) nor a sweep folder (sweep.json)"), "{stderr}");
}

/// A scored record made by hand.
fn rec(id: &str, runtime: bool, em: f64, chrf: f64, skipped: bool) -> SampleRecord {
    let mut v = serde_json::json!({
        "id": id, "task": "next_cell", "runtime": runtime, "prediction": "p", "reference": "r",
        "scores": {"exact_match": em, "exact_match_ws": em, "rouge_l": chrf / 100.0, "rouge_l_code": 0.0, "chrf": chrf},
    });
    if skipped {
        v["skipped"] = "over_budget".into();
        v["scores"] = serde_json::Value::Null;
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn paired_bootstrap_on_hand_made_records() {
    let a: Vec<SampleRecord> = (0..8).map(|i| rec(&format!("s{i}"), false, 0.0, 10.0 * f64::from(i), false)).collect();
    // Identical runs: no difference, p = 1.
    let same = compare(&a, &a, 0);
    assert_eq!(same.len(), 1);
    let g = &same[0];
    assert_eq!((g.n_paired, g.only_a, g.only_b), (8, 0, 0));
    for d in [g.exact_match, g.rouge_l, g.chrf] {
        assert_eq!((d.mean_diff, d.ci_low, d.ci_high, d.p_value), (0.0, 0.0, 0.0, 1.0));
    }
    // B: every chrF 5 higher and every exact match 1, listed in reverse order
    // (pairs are matched by id, not position), one sample skipped in B and
    // one only in B.
    let mut b: Vec<SampleRecord> =
        (0..8).rev().map(|i| rec(&format!("s{i}"), false, 1.0, 10.0 * f64::from(i) + 5.0, i == 7)).collect();
    b.push(rec("extra", false, 1.0, 50.0, false));
    let g = &compare(&a, &b, 0)[0];
    assert_eq!((g.n_paired, g.only_a, g.only_b), (7, 1, 1));
    assert_eq!((g.chrf.mean_diff, g.chrf.ci_low, g.chrf.ci_high), (5.0, 5.0, 5.0));
    assert_eq!((g.exact_match.mean_diff, g.exact_match.ci_low, g.exact_match.ci_high), (1.0, 1.0, 1.0));
    assert_eq!(g.chrf.p_value, 1.0 / 1001.0);
    assert!((g.rouge_l.mean_diff - 0.05).abs() < 1e-12 && g.rouge_l.ci_low > 0.0);
    // Groups are kept apart by runtime.
    let mut c = a.clone();
    c.push(rec("t0", true, 1.0, 0.0, false));
    let groups = compare(&c, &c, 0);
    assert_eq!(groups.iter().map(|g| (g.runtime, g.n_paired)).collect::<Vec<_>>(), [(false, 8), (true, 1)]);
}

#[test]
fn test_support_decoders_are_strict() {
    assert_eq!(inflate(&[0x4b, 0x4c, 0x4a, 0x06, 0x00]).unwrap(), b"abc");
    let hello = "cb48cdc9c957c8c020cbf38b7252b088132f0b00";
    let bytes: Vec<u8> =
        (0..hello.len()).step_by(2).map(|i| u8::from_str_radix(&hello[i..i + 2], 16).unwrap()).collect();
    assert_eq!(inflate(&bytes).unwrap(), "hello hello hello hello world ".repeat(3).as_bytes());
    assert!(check_xml("<a><b x=\"1\"/>t &amp; u</a>").is_ok());
    for bad in ["<a><b></a></b>", "<a x=1/>", "<a>&nbsp;</a>", "<a/><b/>", "<a>", "<a x=\"1\" x=\"2\"/>"] {
        assert!(check_xml(bad).is_err(), "{bad} accepted");
    }
}
