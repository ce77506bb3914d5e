//! Lazy creation is exactly once: alone in its binary, so that the process-wide count of created CUDA
//! events moves only because of this test.

use cuda_event_testkit as common;

use cuda_event::pool::cuda_events_created;
use cuda_event::{Event, Stream};
use std::sync::Barrier;

#[test]
#[ignore = "needs a CUDA GPU"]
fn thirty_two_threads_racing_the_first_record_create_one_cuda_event() {
    let _gpu = common::gpu();
    // Count creations, not reuses: with the pool off every first record creates.
    cuda_event::pool::set_event_pool(false);
    for round in 0..20 {
        let event = Event::new();
        let stream = Stream::new(0).unwrap();
        let barrier = Barrier::new(32);
        let before = cuda_events_created();
        let handles: Vec<_> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..32)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        event.record(&stream).unwrap();
                        event.as_raw().unwrap() as usize
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(
            cuda_events_created() - before,
            1,
            "round {round}: more than one CUDA event created"
        );
        assert!(
            handles.iter().all(|&h| h == handles[0]),
            "round {round}: threads saw different handles"
        );
        event.synchronize().unwrap();
    }
}
