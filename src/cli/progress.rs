//! The weight upload bar: the library reports bytes through `backend::Progress`; the binary
//! draws them with indicatif.

use std::sync::Mutex;

use minfer::backend::Progress;

/// Uploads smaller than this finish too fast for a bar to be worth drawing.
const MIN_BYTES: u64 = 256 << 20;

/// A progress callback that draws `upload {bar} {bytes}/{total}` on stderr (hidden when
/// stderr is not a terminal) for uploads of at least [`MIN_BYTES`], and clears it when done.
pub fn upload_bar() -> Progress {
    let bar: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);
    Progress::new(move |done, total| {
        if total < MIN_BYTES {
            return;
        }
        let Ok(mut slot) = bar.lock() else { return };
        let b = slot.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("upload {bar:40} {bytes}/{total_bytes} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        });
        b.set_position(done);
        if done >= total {
            b.finish_and_clear();
            *slot = None;
        }
    })
}
