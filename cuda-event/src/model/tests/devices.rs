//! The current device and `DeviceGuard`; a child forked inside a capture's work.

use super::check_once;
use super::scenario::{fork_here, stream};
use crate::{DeviceGuard, Error, current_device, set_device};

/// A `DeviceGuard` made for the device already current restores it all the same when its scope
/// made another current (a library's `cudaSetDevice`, say), as torch's `torch.cuda.device` does.
/// (It failed before: the guard restored only a device it had changed itself.)
#[test]
fn a_guard_for_the_current_device_restores_it() {
    check_once(|| {
        assert_eq!(current_device(), Ok(0));
        {
            let _guard = DeviceGuard::new(0).unwrap();
            set_device(1).unwrap();
        }
        assert_eq!(current_device(), Ok(0), "the guard's scope leaked its device");
    });
}

/// A child forked inside `Stream::capture`'s work (which goes on in the child when the work
/// returns) makes no driver call and takes no lock: the capture is the parent's. (It failed
/// before: the child ended the parent's capture.)
#[test]
fn a_child_forked_inside_a_captures_work_makes_no_driver_call() {
    check_once(|| {
        let cap = stream();
        let result = cap.capture(crate::capture::CaptureMode::ThreadLocal, |_| {
            fork_here();
            Ok(())
        });
        assert_eq!(result.map(drop), Err(Error::ForkedChild));
    });
}
