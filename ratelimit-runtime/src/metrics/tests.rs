//! The limiter's decisions as `tracing` events (a test of the limiter through its metrics,
//! kept beside them; in its own file so that the metrics module stays below the limiter).

use crate::limiter::Limiter;
use crate::model::limit::Limit;
use crate::model::limit_type::LimitType;
use crate::model::rule::Rule;
use crate::model::subject::Subject;
use crate::store::memory::MemoryStore;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Keeps every event's fields as `name=value` text.
#[derive(Default)]
struct Capture(Mutex<Vec<String>>);

struct Fields(String);
impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for &'static Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn events(log_subjects: bool) -> Vec<String> {
    let capture: &'static Capture = Box::leak(Box::default());
    tracing::subscriber::with_default(capture, || {
        let limiter = Limiter::builder("metrics::unit")
            .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 1).unwrap()]))
            .store(Arc::new(MemoryStore::new()))
            .log_subjects(log_subjects)
            .build()
            .unwrap();
        let ip = [Subject::ip("192.0.2.44".parse().unwrap())];
        assert!(limiter.check(&ip).blocking().is_ok());
        assert!(limiter.check(&ip).blocking().is_err());
    });
    let events = capture.0.lock().unwrap().clone();
    events
}

#[test]
fn one_debug_event_per_decision_without_subject_by_default() {
    let events = events(false);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].contains("limiter=\"metrics::unit\"") || events[0].contains("limiter=metrics::unit"));
    assert!(events[0].contains("outcome=\"allowed\"") || events[0].contains("outcome=allowed"), "{events:?}");
    assert!(events[1].contains("denied"), "{events:?}");
    assert!(events[0].contains("latency_us="), "{events:?}");
    assert!(events.iter().all(|e| !e.contains("192.0.2.44")), "{events:?}");
}

#[test]
fn subjects_are_logged_only_when_asked() {
    let events = events(true);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| e.contains("192.0.2.44")), "{events:?}");
}

/// A recorder that keeps one real counter per name and label set (and no gauges or histograms).
#[derive(Default)]
struct Counting(Mutex<Vec<(String, Arc<std::sync::atomic::AtomicU64>)>>);

impl Counting {
    fn value(&self, key: &str) -> u64 {
        let all = self.0.lock().unwrap();
        all.iter().find(|(k, _)| k == key).map_or(0, |(_, c)| c.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl metrics::Recorder for Counting {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        self.0.lock().unwrap().push((format!("{}{{{}}}", key.name(), labels.join(",")), counter.clone()));
        metrics::Counter::from_arc(counter)
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// A limiter built under a recorder counts per thread and hands its counts over on `flush`; one
/// built with no recorder keeps the no-op handles (and starts no tally).
#[test]
fn counts_under_a_recorder_reach_it_on_flush() {
    assert!(!super::recorder_installed(), "no recorder is installed in this test binary");
    let recorder = Counting::default();
    let limiter = metrics::with_local_recorder(&recorder, || {
        assert!(super::recorder_installed());
        Limiter::builder("metrics::tally")
            .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 3).unwrap()]))
            .store(Arc::new(MemoryStore::new()))
            .build()
            .unwrap()
    });
    assert!(matches!(limiter.metrics().counts, super::Counts::Tally(_)));
    let ip = [Subject::ip("192.0.2.45".parse().unwrap())];
    for _ in 0..5 {
        let _ = limiter.check(&ip).blocking();
    }
    super::flush();
    assert_eq!(recorder.value("ratelimit_decisions_total{limiter=metrics::tally,outcome=allowed}"), 3);
    assert_eq!(recorder.value("ratelimit_decisions_total{limiter=metrics::tally,outcome=denied}"), 2);

    let plain = Limiter::builder("metrics::plain")
        .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 3).unwrap()]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    assert!(matches!(plain.metrics().counts, super::Counts::Direct(_)));
}
