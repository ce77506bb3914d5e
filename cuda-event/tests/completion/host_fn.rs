//! The safe host callback: `Stream::launch_host_fn`.

use cuda_event_testkit as common;

use common::{gpu, gpu_sleep};
use cuda_event::Stream;
use std::sync::mpsc;
use std::time::Duration;

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_fn_runs_once_in_stream_order_and_a_panic_is_contained() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let (sent, received) = mpsc::channel();
    gpu_sleep(&stream, Duration::from_millis(50));
    for i in 0..4 {
        let sent = sent.clone();
        stream
            .launch_host_fn(move || {
                assert!(i != 2, "a panic in a host function is contained");
                sent.send(i).unwrap();
            })
            .unwrap();
    }
    assert_eq!(received.try_iter().count(), 0, "ran before the stream got there");
    stream.synchronize().unwrap();
    assert_eq!(received.try_iter().collect::<Vec<_>>(), [0, 1, 3]);
    // The stream goes on after the panic.
    stream.record_event().unwrap().synchronize().unwrap();
}
