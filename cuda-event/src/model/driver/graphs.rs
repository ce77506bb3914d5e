//! Graphs a capture's end hands over, and the user objects they hold: a graph's destroy releases
//! its references, and an object's destructor runs with the last one.

use super::{OK, call, handle, id};
use crate::model::world::{BROKEN, Code, UserObject, run_destructors, source};
use cuda_event_sys as sys;
use std::ffi::{c_uint, c_void};

pub(super) unsafe extern "C" fn graph_destroy(graph: sys::CUgraph) -> Code {
    let mut destructors = Vec::new();
    let code = call("cuGraphDestroy", |w, _| {
        if !w.graphs.remove(&id(graph)) {
            w.fail(
                "use of a destroyed or unknown graph",
                source::CUDA_DOCS,
                format!("{graph:?}"),
            );
            return BROKEN;
        }
        let objects = w.graph_objects.remove(&id(graph)).unwrap_or_default();
        destructors = w.release_objects(&objects);
        OK
    });
    run_destructors(destructors);
    code
}

pub(super) unsafe extern "C" fn user_object_create(
    object: *mut sys::CUuserObject,
    data: *mut c_void,
    destroy: sys::CUhostFn,
    references: c_uint,
    _flags: c_uint,
) -> Code {
    call("cuUserObjectCreate", |w, _| {
        let Some(destroy) = destroy else {
            return Code::CUDA_ERROR_INVALID_VALUE;
        };
        let o = w.new_handle();
        w.user_objects.insert(
            o,
            UserObject {
                destroy,
                data: data as usize,
                references,
            },
        );
        // SAFETY: a live out-pointer.
        unsafe { *object = handle(o) };
        OK
    })
}

pub(super) unsafe extern "C" fn graph_retain_user_object(
    graph: sys::CUgraph,
    object: sys::CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> Code {
    call("cuGraphRetainUserObject", |w, _| {
        let (g, o) = (id(graph), id(object));
        let open = w.captures.values().any(|c| c.open && c.graph == g);
        if !open && !w.graphs.contains(&g) {
            return Code::CUDA_ERROR_INVALID_VALUE;
        }
        let Some(object) = w.user_objects.get_mut(&o) else {
            return Code::CUDA_ERROR_INVALID_VALUE;
        };
        if flags & 1 == 0 {
            object.references += count; // not moved: new references
        }
        w.graph_objects
            .entry(g)
            .or_default()
            .extend(std::iter::repeat_n(o, count as usize));
        OK
    })
}
