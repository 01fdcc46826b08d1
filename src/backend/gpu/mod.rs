//! What every GPU backend shares: the kernel table (`kernels`) and the schedule that turns a
//! graph into kernel launches (`schedule`). wgpu and CUDA each turn one schedule into their own
//! dispatches; neither holds graph logic of its own.

pub mod kernels;
pub mod schedule;
