//! What kind of answer a prediction is, so formatting failures can be told
//! apart from wrong answers: `empty`, `chatter` (prose instead of code or
//! output), `echo` (a copy of text the prompt already showed: an earlier cell,
//! or for the output task the target cell's own code), or `answer`.
//!
//! The rules are heuristics, applied in that order:
//! - empty: nothing left after cleaning;
//! - echo: the cleaned prediction, with blank lines and trailing spaces
//!   ignored, equals the code of an earlier step, or (output task) equals or
//!   contains the target cell's code, or copies the runtime block's variables
//!   table — unless it also equals the reference;
//! - chatter: the first non-empty line reads as an English sentence (starts
//!   with a word like "Here", "This", "The", "Sure", "To", "You", "I", or has
//!   four or more words and no code punctuation), or the raw answer holds a
//!   fenced block after prose.

use super::normalize_exact;
use crate::data::samples::Task;
use crate::data::Step;
use serde::{Deserialize, Serialize};

/// The kind of a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    Empty,
    Chatter,
    Echo,
    Answer,
}

impl AnswerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Empty => "empty",
            AnswerKind::Chatter => "chatter",
            AnswerKind::Echo => "echo",
            AnswerKind::Answer => "answer",
        }
    }
}

const PROSE_STARTS: &[&str] = &[
    "Here",
    "This",
    "The",
    "Sure",
    "To",
    "You",
    "I",
    "In",
    "It",
    "Let",
    "We",
    "Based",
    "As",
    "Note",
    "Certainly",
    "Output",
    "Answer",
];

fn looks_like_prose(line: &str) -> bool {
    let l = line.trim();
    if l.is_empty() || l.starts_with('#') {
        return false;
    }
    let first = l.split(|c: char| !c.is_alphanumeric() && c != '\'').next().unwrap_or("");
    let words = l.split_whitespace().count();
    let code_punct = l.chars().any(|c| matches!(c, '(' | ')' | '[' | ']' | '=' | '{' | '}' | '_' | '|'));
    let sentence_start = PROSE_STARTS.contains(&first) && words >= 3;
    (sentence_start && !l.contains(" = "))
        || (words >= 4 && !code_punct && l.chars().next().is_some_and(|c| c.is_uppercase()))
}

/// Classify a cleaned prediction.
pub fn classify(task: Task, prediction: &str, reference: &str, history: &[Step], target: &Step) -> AnswerKind {
    let pred = normalize_exact(prediction);
    if pred.is_empty() {
        return AnswerKind::Empty;
    }
    if pred != normalize_exact(reference) {
        let same = |code: &str| {
            let c = normalize_exact(code);
            !c.is_empty() && c == pred
        };
        let echoes_history = history.iter().any(|s| same(&s.code));
        let echoes_target = task == Task::Output && {
            let t = normalize_exact(&target.code);
            !t.is_empty() && pred.contains(&t)
        };
        // The runtime block's table header: the model copied the prompt's
        // variables table instead of answering.
        let echoes_runtime = pred.lines().any(|l| l.trim_start().starts_with("# name | type |"));
        if echoes_history || echoes_target || echoes_runtime {
            return AnswerKind::Echo;
        }
    }
    let first_line = pred.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let ref_first = reference.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if looks_like_prose(first_line) && !looks_like_prose(ref_first) {
        return AnswerKind::Chatter;
    }
    AnswerKind::Answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::OutputKind;

    fn step(code: &str) -> Step {
        Step {
            step: 0,
            code: code.into(),
            output: String::new(),
            output_kind: OutputKind::None,
            stderr: None,
            has_image: false,
            runtime: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn kinds() {
        let hist = vec![step("df = pd.read_csv('a.csv')"), step("df.head()")];
        let target = step("df.shape");
        assert_eq!(classify(Task::NextCell, "  \n", "df.shape", &hist, &target), AnswerKind::Empty);
        assert_eq!(classify(Task::NextCell, "df.head()\n", "df.shape", &hist, &target), AnswerKind::Echo);
        // Repeating an earlier cell that is also the right answer is an answer.
        assert_eq!(classify(Task::NextCell, "df.head()", "df.head()", &hist, &target), AnswerKind::Answer);
        assert_eq!(classify(Task::Output, "df.shape", "(3, 2)", &hist, &target), AnswerKind::Echo);
        assert_eq!(
            classify(Task::NextCell, "Here is the next cell you will run:", "df.shape", &hist, &target),
            AnswerKind::Chatter
        );
        assert_eq!(
            classify(Task::Output, "The output shows the shape of the frame", "(3, 2)", &hist, &target),
            AnswerKind::Chatter
        );
        assert_eq!(classify(Task::NextCell, "df.describe()", "df.shape", &hist, &target), AnswerKind::Answer);
        // Prose-like references (a printed sentence) do not make prose answers chatter.
        assert_eq!(classify(Task::Output, "The mean is 4", "The mean is 3.5", &hist, &target), AnswerKind::Answer);
        assert_eq!(classify(Task::NextCell, "x = 1", "y", &hist, &target), AnswerKind::Answer);
        assert_eq!(
            classify(Task::Output, "# name | type | shape/len | value\n# x | int | - | 1", "1", &hist, &target),
            AnswerKind::Echo
        );
    }
}
