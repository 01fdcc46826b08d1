//! What every GPU backend shares: the kernel table (`table`), each kernel's parameter struct
//! (`params`), the variants and the shared gate (`kernels`), and the schedule that turns a
//! graph into kernel launches (`schedule`). wgpu and CUDA each turn one schedule into their own
//! dispatches; neither holds graph logic of its own.

#[cfg(test)]
mod abi;
pub mod kernels;
pub mod params;
pub mod schedule;
pub mod table;
