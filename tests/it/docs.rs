//! Facts the documentation promises about the code: the README is a short
//! user guide whose first commands are the ones CI runs, `docs/architecture.md`
//! lists every module of [`themisto::MODULE_ORDER`], and the links between the
//! documents point at files that exist.

use std::path::Path;
use themisto::MODULE_ORDER;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The commands of the README's first ```sh block (comments and blank lines left out).
fn readme_first_commands(readme: &str) -> Vec<String> {
    let start = readme.find("```sh\n").expect("the README has a ```sh block") + 6;
    let end = start + readme[start..].find("```").expect("the block ends");
    readme[start..end]
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The command lines of a shell script (not comments, not `step "..."` labels).
fn script_commands(script: &str) -> Vec<String> {
    script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("step "))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_is_a_short_guide() {
    let lines = read("README.md").lines().count();
    assert!(lines <= 400, "README.md has {lines} lines; the guide keeps it to 400 (details go to docs/)");
}

#[test]
fn the_readmes_two_commands_are_the_main_run_and_the_ci_test_command() {
    let readme = read("README.md");
    let first_screen: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    let cmds = readme_first_commands(&first_screen);
    assert_eq!(cmds.len(), 2, "the first screen's block holds exactly two commands: {cmds:?}");
    assert!(cmds[0].starts_with("cargo run --release -- run"), "the first runs the benchmark: {}", cmds[0]);
    let ci = script_commands(&read(".ci/run"));
    let ci_tests: Vec<&String> = ci.iter().filter(|l| l.starts_with("cargo test")).collect();
    assert_eq!(ci_tests.len(), 1, ".ci/run runs one test command: {ci_tests:?}");
    assert_eq!(&cmds[1], ci_tests[0], "the README's test command is the one .ci/run runs");
}

#[test]
fn the_architecture_doc_lists_every_module() {
    let doc = read("docs/architecture.md");
    let missing: Vec<&str> = MODULE_ORDER
        .iter()
        .copied()
        .filter(|m| !doc.contains(&format!("`src/{m}.rs`")) && !doc.contains(&format!("`src/{m}/`")))
        .collect();
    assert!(missing.is_empty(), "docs/architecture.md does not name these modules of MODULE_ORDER: {missing:?}");
    let pos = |m: &str| doc.find(&format!("`src/{m}.rs`")).or_else(|| doc.find(&format!("`src/{m}/`"))).unwrap();
    for pair in MODULE_ORDER.windows(2) {
        assert!(pos(pair[0]) < pos(pair[1]), "docs/architecture.md lists {} after {}", pair[0], pair[1]);
    }
}

#[test]
fn links_between_the_documents_point_at_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    let mut broken = Vec::new();
    for doc in &docs {
        let text = read(doc);
        let dir = root.join(doc).parent().unwrap().to_path_buf();
        let mut rest = text.as_str();
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split('#').next().unwrap();
            if !target.is_empty() && !target.contains("://") && !dir.join(target).exists() {
                broken.push(format!("{doc}: {target}"));
            }
            rest = &after[end..];
        }
    }
    assert!(broken.is_empty(), "links to missing files:\n{}", broken.join("\n"));
}
