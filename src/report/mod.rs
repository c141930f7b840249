//! Reports for people: the summary table printed after a run and `report.md`.

pub mod table;
