//! A measurement as one JSON object: the row format of the examples' machine-readable output, which
//! `bench/*.py` read. The caller's leading fields, then the measurement's statistics (in us), stop
//! reason, gate timeouts, SM clock (`null` when not read) and net time (`null` when there is none:
//! not calibrated, say), then the caller's trailing fields.

use cuda_event::timing::Measurement;
use std::time::Duration;

/// A duration in microseconds, as every row writes one.
pub(crate) fn us(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e6)
}

/// The row: `leading` and `trailing` are (key, value already written as JSON) pairs.
pub(crate) fn row(leading: &[(&str, String)], m: &Measurement, trailing: &[(&str, String)]) -> String {
    let mhz = |clock: Option<f64>| clock.map_or_else(|| "null".to_string(), |v| format!("{v:.1}"));
    let measured = [
        ("median_us", us(m.median())),
        ("mean_us", us(m.mean())),
        ("p10_us", us(m.percentile(10.0))),
        ("p90_us", us(m.percentile(90.0))),
        ("min_us", us(m.min())),
        ("max_us", us(m.max())),
        ("noise", format!("{:.5}", m.noise())),
        ("samples", m.samples().len().to_string()),
        ("stop", format!("\"{:?}\"", m.stop_reason())),
        ("gate_timeouts", m.gate_timeouts().to_string()),
        ("sm_clock_mhz", mhz(m.sm_clock_mhz())),
        ("max_sm_clock_mhz", mhz(m.max_sm_clock_mhz())),
        ("throttled", m.throttled_samples().to_string()),
        ("net_us", m.net().map_or_else(|_| "null".to_string(), us)),
        // Rust's escapes of a string's Debug form are JSON's for the text a verdict holds.
        ("trust", format!("{:?}", m.trust().to_string())),
    ];
    let fields: Vec<String> = leading
        .iter()
        .chain(&measured)
        .chain(trailing)
        .map(|(key, value)| format!("\"{key}\":{value}"))
        .collect();
    format!("{{{}}}", fields.join(","))
}
