//! C interop both ways, on a GPU: C records, queries and waits on events handed in from Rust, and
//! Rust takes over an event created in C (c/abi.c, compiled against the same headers).

use cuda_event_testkit as common;

use common::{gpu, hold};
use cuda_event::{Event, Stream, sys};
use cuda_event_systest::{
    cuda_event_c_create, cuda_event_c_query, cuda_event_c_record, cuda_event_c_stream_wait,
};

const NOT_READY: i32 = sys::cudaError::cudaErrorNotReady.0 as i32;

#[test]
#[ignore = "needs a CUDA GPU"]
fn c_records_and_queries_an_event_handed_in_from_rust() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = Event::new();
    event.record(&stream).unwrap();
    let raw = event.as_raw().unwrap();
    let gate = hold(&stream);
    // SAFETY: a live event and stream of device 0, both owned by Rust values that outlive the calls.
    unsafe {
        assert_eq!(cuda_event_c_record(raw, stream.as_raw()), 0);
        assert_eq!(cuda_event_c_query(raw), NOT_READY);
    }
    assert_eq!(event.query(), Ok(false), "Rust sees the record C made");
    gate.open();
    event.synchronize().unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { cuda_event_c_query(raw) }, 0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn c_makes_a_rust_stream_wait_on_a_rust_event() {
    let _gpu = gpu();
    let (held, waiter) = (Stream::new(0).unwrap(), Stream::new(0).unwrap());
    let gate = hold(&held);
    let event = held.record_event().unwrap();
    // SAFETY: a live stream and event owned by Rust values that outlive the call.
    let rc = unsafe { cuda_event_c_stream_wait(waiter.as_raw(), event.as_raw().unwrap()) };
    assert_eq!(rc, 0);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(waiter.query(), Ok(false));
    gate.open();
    waiter.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rust_takes_over_an_event_created_in_c() {
    let _gpu = gpu();
    cuda_event::drop_errors::take_drop_errors();
    cuda_event::set_device(0).unwrap();
    let mut raw = std::ptr::null_mut();
    // SAFETY: C writes a new event of the current device (0) through a live local.
    let rc = unsafe { cuda_event_c_create(&mut raw, sys::cudaEventDisableTiming) };
    assert_eq!(rc, 0);
    // SAFETY: C created it on device 0 without timing, and nothing else owns it.
    let event = unsafe { Event::from_raw(raw, 0, Event::builder()) };
    assert_eq!(event.device(), Some(0));
    let stream = Stream::new(0).unwrap();
    let gate = hold(&stream);
    event.record(&stream).unwrap();
    assert_eq!(event.query(), Ok(false));
    gate.open();
    event.synchronize().unwrap();
    drop(event);
    assert_eq!(
        cuda_event::drop_errors::take_drop_errors(),
        Default::default(),
        "the C event was destroyed cleanly"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_given_up_with_into_raw_is_c_owned() {
    let _gpu = gpu();
    let stream = Stream::new(0).unwrap();
    let event = stream.record_event().unwrap();
    let raw = event.into_raw().unwrap();
    // SAFETY: the handle is live and now owned here; destroyed once, below.
    unsafe {
        assert_eq!(cuda_event_c_record(raw, stream.as_raw()), 0);
        assert_eq!(sys::cudaEventSynchronize(raw), sys::cudaError::cudaSuccess);
        assert_eq!(cuda_event_c_query(raw), 0);
        assert_eq!(sys::cudaEventDestroy(raw), sys::cudaError::cudaSuccess);
    }
}
