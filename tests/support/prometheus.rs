//! A small parser of the Prometheus text exposition format (0.0.4): tests read the numbers back
//! from what a scraper would get, not by searching the text.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// This test binary's recorder, installed on first use: before any limiter it should count for
/// is built (a limiter takes its counters when it is built).
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().expect("install the Prometheus recorder"))
}

/// What a scrape of [`recorder`] reads now, after the limiters' counts are flushed to it (as the
/// example server's `/metrics` does).
pub fn scrape() -> Scrape {
    ratelimit::metrics::flush();
    scrape_unflushed()
}

/// What a scrape of [`recorder`] reads now, without flushing: decision counts show up within
/// `ratelimit::metrics::FLUSH_EVERY`.
pub fn scrape_unflushed() -> Scrape {
    let text = recorder().render();
    Scrape::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of a scrape, with the `# TYPE` of each metric family.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    /// Parses a whole scrape; a malformed line is an error naming it.
    pub fn parse(text: &str) -> Result<Scrape, String> {
        let mut scrape = Scrape::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.split_whitespace();
                if words.next() == Some("TYPE") {
                    let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                        return Err(format!("line {}: malformed TYPE: {line:?}", n + 1));
                    };
                    scrape.types.insert(name.to_owned(), kind.to_owned());
                }
                continue;
            }
            let sample = parse_sample(line).map_err(|e| format!("line {}: {e}: {line:?}", n + 1))?;
            scrape.samples.push(sample);
        }
        Ok(scrape)
    }

    /// The samples named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one sample named `name` with exactly these labels, if any.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self.matching(name, labels).filter(|s| s.labels.len() == labels.len()).collect();
        assert!(found.len() <= 1, "{name} {labels:?} matches {} samples", found.len());
        found.first().map(|s| s.value)
    }

    /// The value, 0 when the series does not exist (counters appear on first increment).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// The sum over every sample named `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// Every label value of every sample.
    pub fn label_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.samples.iter().flat_map(|s| s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ', '\t']).ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or("label without =")?;
            let key = rest[..eq].trim();
            rest = rest[eq + 1..].strip_prefix('"').ok_or("label value not quoted")?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err("unterminated label value".to_owned()),
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some((_, c)) => value.push(c),
                }
            };
            rest = &rest[end + 1..];
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
        }
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>().map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".to_owned());
    }
    Ok(Sample { name: name.to_owned(), labels, value })
}
