//! Facts about the embedded sample (`src/data/sample.jsonl`), which
//! `scripts/make_sample.sh` records from `tests/fixtures/sample_notebooks/`.

use std::collections::BTreeSet;
use themisto::data::{embedded, OutputKind};

#[test]
fn sample_has_the_promised_shape() {
    let d = embedded::load().unwrap();
    let ids: BTreeSet<&str> = d.trajectories.iter().map(|t| t.id.as_str()).collect();
    let expected: BTreeSet<&str> =
        ["churn_model", "review_text", "sales_cleaning", "sensor_logs", "survey_analysis", "weather_explore"]
            .into_iter()
            .collect();
    assert_eq!(ids, expected);
    assert!(d.step_count() >= 120, "{} steps", d.step_count());
    assert!(embedded::SAMPLE_JSONL.len() < 1_500_000);
    for t in &d.trajectories {
        assert!(t.steps.len() >= 20, "{} has {} steps", t.id, t.steps.len());
        assert!(t.steps.iter().all(|s| s.extra.get("recorder_end").is_none()), "{} ended early", t.id);
        let errors = t.steps.iter().filter(|s| s.output_kind == OutputKind::Error).count();
        assert!(errors >= 1, "{} has a bug-and-fix pair", t.id);
        for s in &t.steps {
            let rt = s.runtime.as_ref().unwrap_or_else(|| panic!("{} step {} has no runtime", t.id, s.step));
            assert!(rt.exec_time_s.is_some() && rt.memory_bytes.is_some() && rt.state_hash.is_some());
            assert!(!s.output.contains(" at 0x"), "{} step {} shows an address", t.id, s.step);
        }
    }
}

#[test]
fn every_error_is_followed_by_a_successful_cell() {
    let d = embedded::load().unwrap();
    for t in &d.trajectories {
        for pair in t.steps.windows(2) {
            if pair[0].output_kind == OutputKind::Error {
                assert_ne!(pair[1].output_kind, OutputKind::Error, "{} step {}", t.id, pair[1].step);
            }
        }
    }
}

#[test]
fn sample_outputs_look_like_a_notebook() {
    let d = embedded::load().unwrap();
    let sales = d.trajectory("sales_cleaning").unwrap();
    let head = &sales.steps[1];
    assert_eq!(head.code, "orders = pd.read_csv(\"data/orders.csv\")\norders.head()");
    assert_eq!(head.output_kind, OutputKind::ExecuteResult);
    assert!(head.output.starts_with("  order_id  order_date region customer_id product_id"), "{}", head.output);
    let orders = head.runtime.as_ref().unwrap().variables.iter().find(|v| v.name == "orders").unwrap();
    assert_eq!(orders.type_name, "DataFrame");
    assert_eq!(orders.shape.as_deref(), Some(&[628u64, 8][..]));
    let err = sales.steps.iter().find(|s| s.output_kind == OutputKind::Error).unwrap();
    assert!(err.output.ends_with("ValueError: could not convert string to float: '$12.00'"), "{}", err.output);
    let kinds: BTreeSet<&str> =
        d.trajectories.iter().flat_map(|t| t.steps.iter().map(|s| s.output_kind.as_str())).collect();
    for k in ["stream", "execute_result", "error", "display", "none"] {
        assert!(kinds.contains(k), "no {k} step in the sample");
    }
}
