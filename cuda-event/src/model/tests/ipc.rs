//! Interprocess events: an export after a device reset, an import of this process's own handle.

use super::check_once;
use super::scenario::{reset, stream};
use crate::{Error, Event, IpcEventHandle};

/// After a device reset destroyed an exported event, `ipc_handle` is `DeviceWasReset`, as every
/// other call on it: an importer given the cached handle would open a destroyed event. (It failed
/// before: the handle exported before the reset came back `Ok`.)
#[test]
fn an_export_after_a_reset_is_refused() {
    check_once(|| {
        let plain = stream();
        let shared = Event::builder().interprocess(true).build().unwrap();
        shared.record(&plain).unwrap();
        shared.ipc_handle().unwrap();
        reset(0);
        assert!(matches!(shared.query(), Err(Error::DeviceWasReset { .. })));
        let again = shared.ipc_handle();
        assert!(matches!(again, Err(Error::DeviceWasReset { .. })), "{again:?}");
    });
}

/// A handle of this process that the crate does not remember (exported by other code, or by an
/// event given up with `into_raw`) is refused as this process's, with no CUDA call: it names its
/// exporter's process. (It failed before: CUDA's open answered its own, less clear error.)
#[test]
fn a_handle_naming_this_process_is_refused_as_this_processs() {
    check_once(|| {
        let mut bytes = [0u8; 64];
        bytes[..4].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[8] = 0x42;
        let handle = IpcEventHandle::from_bytes(&bytes).unwrap();
        assert_eq!(
            Event::from_ipc_handle(0, handle).map(drop),
            Err(Error::IpcHandleFromThisProcess)
        );
    });
}
