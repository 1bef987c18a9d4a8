//! Medians, spreads, and the closing table of targets.

pub const ROUNDS: usize = 5;

/// A figure measured over several rounds.
#[derive(Clone, Copy, Debug)]
pub struct Figure {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Figure {
    pub fn of(mut xs: Vec<f64>) -> Figure {
        xs.sort_by(f64::total_cmp);
        Figure { median: xs[xs.len() / 2], min: xs[0], max: xs[xs.len() - 1] }
    }

    pub fn show(&self, unit: &str) -> String {
        format!("{} {unit} [{}–{}]", fmt(self.median), fmt(self.min), fmt(self.max))
    }
}

pub fn fmt(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A target: measured / reference must be at most (or at least) `bound`.
pub struct Target {
    pub name: &'static str,
    pub measured: String,
    pub reference: String,
    pub ratio: f64,
    pub bound: f64,
    pub at_most: bool,
}

#[derive(Default)]
pub struct Report {
    targets: Vec<Target>,
}

impl Report {
    pub fn target(&mut self, t: Target) {
        self.targets.push(t);
    }

    pub fn print_targets(&self) {
        println!("\n== Targets ==");
        println!("{:<44} {:>18} {:>18} {:>8} {:>9} {:>4}", "figure", "measured", "reference", "ratio", "target", "met");
        for t in &self.targets {
            let met = if t.at_most { t.ratio <= t.bound } else { t.ratio >= t.bound };
            let bound = format!("{}{:.2}x", if t.at_most { "<=" } else { ">=" }, t.bound);
            println!(
                "{:<44} {:>18} {:>18} {:>7.2}x {:>9} {:>4}",
                t.name,
                t.measured,
                t.reference,
                t.ratio,
                bound,
                if met { "yes" } else { "NO" }
            );
        }
    }
}

/// The p-quantile of sorted samples.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
