//! Interprocess events: an export after a device reset.

use super::check_once;
use super::scenario::{reset, stream};
use crate::{Error, Event};

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
