//! With the `tracing` feature, a layer that turns the `tracing` crate's spans into a trace's host
//! spans: each time a span is entered on a thread, a host span of the span's name opens on that
//! thread's track, and closes when the span is exited there. So an application already
//! instrumented with `tracing` gets its spans on the same timeline as its GPU ranges.

use super::Trace;
use super::lanes::Lane;
use super::range::close_host;
use std::borrow::Cow;
use std::sync::Arc;
use tracing_core::{Subscriber, span};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// A [`tracing_subscriber`] layer that opens a [`Trace`] host span for each entry of a `tracing`
/// span (feature `tracing`):
///
/// ```no_run
/// # fn main() {
/// use cuda_event::trace::{Trace, TraceSpans};
/// use std::sync::Arc;
/// use tracing_subscriber::layer::SubscriberExt;
/// let trace = Arc::new(Trace::new());
/// let subscriber = tracing_subscriber::registry().with(TraceSpans::new(trace.clone()));
/// tracing::subscriber::set_global_default(subscriber).unwrap();
/// // ... spans entered from now on are host spans of `trace` ...
/// # }
/// ```
///
/// A span entered on several threads at once gets a host span on each. Spans entered while the
/// trace is full are dropped and counted, as any range. The layer needs a subscriber that stores
/// span data ([`tracing_subscriber::registry`](mod@tracing_subscriber::registry)), where it keeps
/// each open entry.
#[derive(Debug, Clone)]
pub struct TraceSpans {
    trace: Arc<Trace>,
}

/// The open host spans of one `tracing` span's entries: one per thread it is entered on.
struct Entries(Vec<(std::thread::ThreadId, (Arc<Lane>, usize))>);

impl TraceSpans {
    /// A layer that records into `trace`.
    pub fn new(trace: Arc<Trace>) -> TraceSpans {
        TraceSpans { trace }
    }

    /// The trace it records into.
    pub fn trace(&self) -> &Arc<Trace> {
        &self.trace
    }
}

impl<S> Layer<S> for TraceSpans
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(open) = self.trace.open_host(Cow::Borrowed(span.name())) else {
            return;
        };
        let entry = (std::thread::current().id(), open);
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<Entries>() {
            Some(entries) => entries.0.push(entry),
            None => extensions.insert(Entries(vec![entry])),
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let here = std::thread::current().id();
        let open = {
            let mut extensions = span.extensions_mut();
            let Some(entries) = extensions.get_mut::<Entries>() else {
                return;
            };
            let Some(i) = entries.0.iter().rposition(|(thread, _)| *thread == here) else {
                return;
            };
            entries.0.swap_remove(i).1
        };
        close_host(open);
    }
}

#[cfg(all(test, not(cuda_event_model)))]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn entered_spans_are_host_spans_nested_on_their_threads() {
        let trace = Arc::new(Trace::new());
        let subscriber = tracing_subscriber::registry().with(TraceSpans::new(trace.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer");
            let _outer = outer.enter();
            for _ in 0..2 {
                let _inner = tracing::info_span!("inner").entered();
            }
            // Entered again: a second host span of the same name.
            drop(_outer);
            let _again = outer.enter();
        });
        let mut read = trace.take_complete();
        read.ranges.sort_by_key(|r| r.start);
        let seen: Vec<(&str, u32)> = read.ranges.iter().map(|r| (r.name.as_ref(), r.depth)).collect();
        assert_eq!(
            seen,
            [("outer", 0), ("inner", 1), ("inner", 1), ("outer", 0)],
            "{read:?}"
        );
        assert_eq!((read.open, trace.held()), (0, 0));
    }
}
