//! The wgpu instance: on Linux and the BSDs, a Vulkan instance without window-system
//! extensions, because a compute engine never presents and asking for them makes noise.
//!
//! wgpu enables every surface extension the loader offers (`VK_KHR_xlib_surface`,
//! `VK_KHR_xcb_surface`, `VK_KHR_wayland_surface`). Mesa's implicit device-select layer
//! (`VK_LAYER_MESA_device_select`, installed with mesa-vulkan-drivers) sees the Wayland one
//! enabled and, in `vkEnumeratePhysicalDevices`, connects to the compositor to learn its default
//! GPU; without `XDG_RUNTIME_DIR`, libwayland prints `error: XDG_RUNTIME_DIR is invalid or not
//! set in the environment.` on every enumeration (twice per process). Without the extension the
//! layer makes no connection; every other message (the loader's, a driver's, the validation
//! layer's) is untouched. Where this instance cannot be made, wgpu's own is used.

/// The instance adapters are enumerated on: wgpu's, configured from its own `WGPU_*`
/// variables, minus the window-system extensions where Vulkan is the backend.
pub fn instance() -> wgpu::Instance {
    #[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
    if let Some(i) = vulkan_without_surfaces() {
        return i;
    }
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// Instance extensions that only a window needs.
#[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
const WINDOW_SYSTEM: [&std::ffi::CStr; 3] = [c"VK_KHR_xlib_surface", c"VK_KHR_xcb_surface", c"VK_KHR_wayland_surface"];

#[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
fn vulkan_without_surfaces() -> Option<wgpu::Instance> {
    use wgpu::hal;
    let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    // Vulkan is the only backend this build has here; `WGPU_BACKEND` may still rule it out.
    if !desc.backends.contains(wgpu::Backends::VULKAN) {
        return None;
    }
    let hal_desc = hal::InstanceDescriptor {
        name: "minfer",
        flags: desc.flags,
        memory_budget_thresholds: desc.memory_budget_thresholds,
        backend_options: desc.backend_options.clone(),
        telemetry: None,
        display: None,
    };
    let strip = |args: hal::vulkan::CreateInstanceCallbackArgs| {
        args.extensions.retain(|e| !WINDOW_SYSTEM.contains(e));
    };
    // SAFETY: the descriptor is wgpu's own for this platform. The callback only drops surface
    // extensions: wgpu-hal checks its list of enabled extensions before it creates any surface
    // (`create_surface_from_xlib/xcb/wayland` refuse when the extension is absent), and this
    // engine creates none; no device feature depends on them.
    let raw = unsafe { hal::vulkan::Instance::init_with_callback(&hal_desc, Some(Box::new(strip))) }.ok()?;
    // SAFETY: `raw` is a valid Vulkan instance, just created, and handed over whole.
    Some(unsafe { wgpu::Instance::from_hal::<hal::api::Vulkan>(raw) })
}
