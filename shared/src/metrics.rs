//! Prometheus text exposition (format 0.0.4), written by hand because what we
//! expose is a handful of counters and gauges: the worker's and the gateway's
//! `/metrics` both use this one writer.

use std::fmt::Write as _;

/// Metric kinds we expose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// Accumulates a `/metrics` page.
#[derive(Default, Debug)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a metric family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        self
    }

    /// One sample of the current family, with label pairs.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.text, "{k}=\"{v}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
        self
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    pub fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_help_type_and_escaped_labels() {
        let mut e = Exposition::new();
        e.family("sluice_decisions_total", Kind::Counter, "Decisions made.")
            .sample("sluice_decisions_total", &[("outcome", "allowed")], 3.0)
            .sample("sluice_decisions_total", &[("outcome", "a\"b")], 1.0);
        e.single("sluice_up", Kind::Gauge, "1 when running.", 1.0);
        assert_eq!(
            e.finish(),
            "# HELP sluice_decisions_total Decisions made.\n# TYPE sluice_decisions_total counter\n\
             sluice_decisions_total{outcome=\"allowed\"} 3\n\
             sluice_decisions_total{outcome=\"a\\\"b\"} 1\n\
             # HELP sluice_up 1 when running.\n# TYPE sluice_up gauge\nsluice_up 1\n"
        );
    }
}
