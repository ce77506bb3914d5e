//! The torch_ipc example, run as a GPU test when python3 can import torch with CUDA: interprocess
//! events shared with PyTorch both ways, each side checking that the other's event held its stream.
//! The test runs the example's binary, as a user runs it.

use cuda_event_testkit as common;

#[test]
#[ignore = "needs a CUDA GPU"]
fn events_shared_with_torch_both_ways_hold_the_other_sides_stream() {
    if common::skip_under_sanitizer(
        "its child is PyTorch, whose own CUDA calls are not this crate's to answer for",
    ) {
        return;
    }
    let _gpu = common::gpu_for(std::time::Duration::from_secs(120));
    let torch = std::process::Command::new("python3")
        .args(["-c", "import torch; assert torch.cuda.is_available()"])
        .output();
    if !torch.is_ok_and(|out| out.status.success()) {
        assert!(
            !common::required("CUDA_EVENT_TEST_TORCH", "1"),
            "python3 cannot import torch with CUDA here, and CUDA_EVENT_TEST_TORCH=1 requires it"
        );
        println!("skipped: python3 cannot import torch with CUDA here");
        return;
    }
    common::run_example("torch_ipc");
}
