//! `/metrics` pages through the Prometheus client library
//! (`prometheus-client`, the Prometheus project's own crate), for the
//! worker's and the gateway's alike, so neither writes exposition text by
//! hand.
//!
//! A page is a [`Registry`] rendered by [`render`] in the Prometheus text
//! format 0.0.4 ([`CONTENT_TYPE`]): the format Prometheus scrapes by default
//! and the one these pages always had, so a counter registered as `x`
//! shows as `x_total`, as before. Metrics measured where things happen are
//! the library's own types (counters, histograms) registered in it; values a
//! service already keeps for other readers (`sluice status`, the client's
//! stats) are read at scrape time by a [`Collector`](prometheus_client::collector::Collector)
//! that encodes them with [`counter`], [`gauge`] and
//! [`family`], rather than being copied into a second set of counters.

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::TypedMetric;
pub use prometheus_client::metrics::{counter::ConstCounter, gauge::ConstGauge};
pub use prometheus_client::registry::Registry;
use std::fmt;

/// The `Content-Type` of a rendered page.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The page of `registry`. Writing to a `String` cannot fail: an error
/// is a collector's (a bug), and the page is better refused than partial.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry)?;
    Ok(text)
}

/// A counter read at scrape time: `name` is shown as `name_total`.
pub fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let counter = ConstCounter::new(value);
    counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)
}

/// A gauge read at scrape time.
pub fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> fmt::Result {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

/// A family of values read at scrape time: one sample per label set, each
/// a [`ConstCounter`] or a [`ConstGauge`].
pub fn family<L: EncodeLabelSet, M: EncodeMetric + TypedMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, M::TYPE)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;

    #[derive(Debug)]
    struct Fixed;

    impl Collector for Fixed {
        fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
            family(
                &mut e,
                "sluice_decisions",
                "Decisions made.",
                [("allowed", 3u64), ("a\"b", 1)]
                    .map(|(o, n)| ([("outcome", o)], ConstCounter::new(n))),
            )?;
            gauge(&mut e, "sluice_up", "1 when running.", 1)
        }
    }

    #[test]
    fn values_read_at_scrape_time_render_as_prometheus_text() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed));
        assert_eq!(
            render(&registry).unwrap(),
            "# HELP sluice_decisions_total Decisions made.\n# TYPE sluice_decisions_total counter\n\
             sluice_decisions_total{outcome=\"allowed\"} 3\n\
             sluice_decisions_total{outcome=\"a\\\"b\"} 1\n\
             # HELP sluice_up 1 when running.\n# TYPE sluice_up gauge\nsluice_up 1\n"
        );
    }
}
