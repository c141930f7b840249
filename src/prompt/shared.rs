//! Prefix-stable fitting (`--fit shared`): one history window per step,
//! shared by the step's four prompts (both tasks, with and without runtime),
//! and moved along a trajectory in jumps, so that consecutive prompts share a
//! long token prefix that the model computes once.
//!
//! A [`Window`] says which history steps are shown (from `first_step` on)
//! and the cap on every shown step's output (the newest included, so a step
//! looks the same in every later prompt). The windows of a step are indexed
//! fullest first ([`window`]); an index means the same window at every step
//! where it exists, so the walk along a trajectory only ever moves forward.
//!
//! At each step ([`next_window`]) the walk keeps the previous step's window
//! when all four prompts still fit; then the step's prompts extend the
//! previous step's. When the budget forces a move, it moves far enough to
//! leave [`JUMP_HEADROOM`] of the budget free for the steps that follow (or,
//! when that is impossible, as far as the budget needs). When not even the
//! newest step fits beside the largest variant, the step has no window and
//! its prompts are fitted one by one (see [`super::fit`]).

/// Caps (characters) on the outputs of shown steps, fullest first: the
/// first windows of every step keep all steps and tighten the cap.
pub const CAPS: [Option<usize>; 5] = [None, Some(2000), Some(1000), Some(500), Some(250)];

/// Share of the prompt budget that a forced move of the window leaves free
/// for the steps after it.
pub const JUMP_HEADROOM: f64 = 0.25;

/// The history a step's prompts show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// History steps before this index are not shown.
    pub first_step: usize,
    /// Cap (characters) on the output of every shown step.
    pub output_cap: Option<usize>,
}

/// The window of index `i`: first the caps of [`CAPS`] over all steps, then
/// the oldest steps dropped one by one under the tightest cap.
pub fn window(i: usize) -> Window {
    if i < CAPS.len() {
        Window { first_step: 0, output_cap: CAPS[i] }
    } else {
        Window { first_step: i - CAPS.len() + 1, output_cap: CAPS[CAPS.len() - 1] }
    }
}

/// Index of the leanest window of a step with `history` earlier steps (it
/// shows the newest step only; a step without history has one window).
pub fn last_index(history: usize) -> usize {
    if history == 0 {
        0
    } else {
        CAPS.len() - 1 + history - 1
    }
}

/// The budget a forced move aims for: `budget` less [`JUMP_HEADROOM`] of it.
pub fn jump_budget(budget: usize) -> usize {
    budget - (budget as f64 * JUMP_HEADROOM).floor() as usize
}

/// The smallest index in `lo..=hi` for which `pred` holds, by binary search
/// (prompts get shorter along the indices); `None` when it fails at `hi`.
/// The index returned has been checked.
fn smallest<E>(lo: usize, hi: usize, mut pred: impl FnMut(usize) -> Result<bool, E>) -> Result<Option<usize>, E> {
    if lo > hi || !pred(hi)? {
        return Ok(None);
    }
    // Invariant: pred(hi) holds; every index below `lo` is not wanted.
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(hi))
}

/// The window of step `step` (with `step` history steps) given the index
/// the walk stood at (`floor`): returns the chosen index (`None` when no
/// window fits) and the index the next step starts from. `fits(window,
/// budget)` says whether all prompts of the step fit `budget` tokens.
pub fn next_window<E>(
    step: usize,
    floor: usize,
    budget: usize,
    mut fits: impl FnMut(Window, usize) -> Result<bool, E>,
) -> Result<(Option<usize>, usize), E> {
    let last = last_index(step);
    let floor = floor.min(last);
    if fits(window(floor), budget)? {
        return Ok((Some(floor), floor));
    }
    let aim = jump_budget(budget);
    if let Some(i) = smallest(floor + 1, last, |i| fits(window(i), aim))? {
        return Ok((Some(i), i));
    }
    if let Some(i) = smallest(floor + 1, last, |i| fits(window(i), budget))? {
        return Ok((Some(i), i));
    }
    Ok((None, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_ordered_fullest_first() {
        assert_eq!(window(0), Window { first_step: 0, output_cap: None });
        assert_eq!(window(4), Window { first_step: 0, output_cap: Some(250) });
        assert_eq!(window(5), Window { first_step: 1, output_cap: Some(250) });
        assert_eq!(last_index(0), 0);
        assert_eq!(last_index(1), 4);
        assert_eq!(window(last_index(7)).first_step, 6);
        assert_eq!(jump_budget(1000), 750);
    }

    /// Cost model: every step costs 100 tokens, whatever the cap.
    fn walk(steps: usize, budget: usize) -> Vec<Option<usize>> {
        let mut floor = 0;
        let mut out = Vec::new();
        for k in 0..steps {
            let (w, f) =
                next_window(k, floor, budget, |w, b| Ok::<_, ()>(100 * (k - w.first_step.min(k)) + 50 <= b)).unwrap();
            out.push(w.map(|i| window(i).first_step));
            floor = f;
        }
        out
    }

    #[test]
    fn the_window_moves_in_jumps_and_stays_put_in_between() {
        let firsts: Vec<usize> = walk(30, 1050).into_iter().map(|w| w.unwrap()).collect();
        // 10 steps fit; a forced move leaves room for 2 more (750 tokens: 7 steps kept).
        let moves: Vec<usize> = (1..firsts.len()).filter(|&k| firsts[k] != firsts[k - 1]).collect();
        assert_eq!(&firsts[..11], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(firsts[11], 4);
        assert!(moves.windows(2).all(|m| m[1] - m[0] >= 3), "{moves:?} {firsts:?}");
        assert!(firsts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn no_window_when_nothing_fits() {
        assert_eq!(walk(3, 160), vec![Some(0), Some(0), Some(1)]);
        assert_eq!(walk(3, 40), vec![None, None, None]);
    }
}
