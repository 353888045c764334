//! `coffer image import` and `coffer image export`: a raw file (a disk image) into a new
//! image, and an image into a raw file or standard output, an object at a time with several
//! in flight, with a progress bar. Zeros are neither stored on import (the image stays
//! sparse) nor written on export to a file (it gets holes).

use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use block::image::{self, Access};
use block::{Extent, Image};
use bytes::Bytes;
use client::Pool;
use futures::stream::{FuturesUnordered, StreamExt, TryStreamExt};

use crate::progress::Progress;

/// Objects read or written at once.
const OBJECTS_IN_FLIGHT: usize = 8;
/// Image sizes are whole sectors (NBD's).
const SECTOR_BYTES: u64 = 512;

/// What a transfer moved: its size, and the bytes that were not zeros.
struct Moved {
    size: u64,
    stored: u64,
    seconds: f64,
}

impl Moved {
    fn summary(&self) -> String {
        format!(
            "{} ({} of data, the rest zeros) in {:.1} s, {}/s",
            crate::text::size(self.size),
            crate::text::approximate(self.stored),
            self.seconds,
            crate::text::approximate((self.size as f64 / self.seconds.max(1e-3)) as u64)
        )
    }
}

/// Creates image `name` of `pool` as large as `file` and writes the file's bytes into it.
/// If the copy fails, the new image is removed again (the error says so).
pub async fn import(
    pool: &Pool,
    name: &str,
    spec: &str,
    file: &Path,
    object_size: u64,
) -> Result<(), String> {
    let mut source = File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let size = source
        .metadata()
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    if size == 0 || !size.is_multiple_of(SECTOR_BYTES) {
        return Err(format!(
            "{} is {}: an image is a whole number of {SECTOR_BYTES}-byte sectors, at least \
             one; pad the file first (truncate -s %{SECTOR_BYTES} FILE)",
            file.display(),
            crate::text::count(size, "byte", "bytes")
        ));
    }
    image::create(pool, name, size, object_size)
        .await
        .map_err(|e| e.to_string())?;
    let copied = copy_in(pool, name, &mut source, size, object_size).await;
    match copied {
        Ok(moved) => {
            println!(
                "imported {} into {spec}: {}",
                file.display(),
                moved.summary()
            );
            Ok(())
        }
        Err(e) => {
            let removed = match image::remove(pool, name).await {
                Ok(()) => "the new image was removed".to_string(),
                Err(r) => format!("removing the new image failed too ({r}); remove it by hand"),
            };
            Err(format!(
                "importing {} into {spec}: {e}; {removed}",
                file.display()
            ))
        }
    }
}

async fn copy_in(
    pool: &Pool,
    name: &str,
    source: &mut File,
    size: u64,
    object_size: u64,
) -> Result<Moved, String> {
    let started = Instant::now();
    let image = Image::open(
        pool,
        name,
        Access::Write {
            purpose: "image import",
            wait_stale: false,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let progress = Progress::new("import", size.div_ceil(1 << 20), "MiB");
    let mut in_flight = FuturesUnordered::new();
    let (mut offset, mut done, mut stored) = (0u64, 0u64, 0u64);
    let written = async {
        while offset < size || !in_flight.is_empty() {
            while offset < size && in_flight.len() < OBJECTS_IN_FLIGHT {
                let len = object_size.min(size - offset);
                let mut chunk = vec![0u8; len as usize];
                source
                    .read_exact(&mut chunk)
                    .map_err(|e| format!("reading at byte {offset}: {e}"))?;
                let at = offset;
                offset += len;
                if chunk.iter().all(|b| *b == 0) {
                    done += len;
                    continue;
                }
                stored += len;
                let image = &image;
                in_flight.push(async move {
                    image
                        .write(at, Bytes::from(chunk))
                        .await
                        .map(|()| len)
                        .map_err(|e| format!("writing at byte {at}: {e}"))
                });
            }
            if let Some(result) = in_flight.next().await {
                done += result?;
            }
            progress.reached(done >> 20, size.div_ceil(1 << 20));
        }
        Ok::<(), String>(())
    }
    .await;
    progress.finish();
    let closed = image.close().await.map_err(|e| e.to_string());
    written?;
    closed?;
    Ok(Moved {
        size,
        stored,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes image `name` of `pool` to `file` (`-`: standard output). A file must not exist
/// yet; the image's holes become holes in it.
pub async fn export(pool: &Pool, name: &str, spec: &str, file: &Path) -> Result<(), String> {
    let to_stdout = file == Path::new("-");
    if to_stdout && std::io::stdout().is_terminal() {
        return Err("export to - writes the image to standard output: redirect it".into());
    }
    let image = Image::open(pool, name, Access::ReadOnly)
        .await
        .map_err(|e| e.to_string())?;
    let mut sink: Box<dyn Sink> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        let created = File::options()
            .write(true)
            .create_new(true)
            .open(file)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!(
                    "{} exists: export writes a new file (remove it first)",
                    file.display()
                ),
                _ => format!("{}: {e}", file.display()),
            })?;
        Box::new(created)
    };
    let moved = copy_out(&image, sink.as_mut()).await;
    let moved = match moved {
        Ok(moved) => moved,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(file);
            }
            return Err(format!("exporting {spec}: {e}"));
        }
    };
    let line = format!("exported {spec} to {}: {}", file.display(), moved.summary());
    if to_stdout {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    Ok(())
}

/// Where an export goes: a file skips over zeros, a stream writes them.
trait Sink {
    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    fn zeros(&mut self, len: u64) -> std::io::Result<()>;
    /// Called once at the end, at `size` bytes.
    fn finish(&mut self, size: u64) -> std::io::Result<()>;
}

impl Sink for File {
    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }

    fn zeros(&mut self, len: u64) -> std::io::Result<()> {
        let len = i64::try_from(len).map_err(std::io::Error::other)?;
        self.seek(SeekFrom::Current(len)).map(|_| ())
    }

    fn finish(&mut self, size: u64) -> std::io::Result<()> {
        self.set_len(size)?;
        self.sync_all()
    }
}

impl Sink for std::io::StdoutLock<'_> {
    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }

    fn zeros(&mut self, mut len: u64) -> std::io::Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        while len > 0 {
            let n = len.min(ZEROS.len() as u64) as usize;
            self.write_all(&ZEROS[..n])?;
            len -= n as u64;
        }
        Ok(())
    }

    fn finish(&mut self, _size: u64) -> std::io::Result<()> {
        self.flush()
    }
}

async fn copy_out(image: &Image, sink: &mut dyn Sink) -> Result<Moved, String> {
    let started = Instant::now();
    let (size, object_size) = (image.size(), image.object_size());
    let progress = Progress::new("export", size.div_ceil(1 << 20), "MiB");
    let reads = futures::stream::iter((0..size).step_by(object_size as usize))
        .map(|offset| async move {
            let len = object_size.min(size - offset);
            image
                .read(offset, len)
                .await
                .map_err(|e| format!("reading at byte {offset}: {e}"))
        })
        .buffered(OBJECTS_IN_FLIGHT);
    let (mut done, mut stored) = (0u64, 0u64);
    let copied = reads
        .try_for_each(|extents| {
            let result = extents.iter().try_for_each(|extent| {
                done += extent.len();
                match extent {
                    Extent::Data(bytes) => {
                        stored += bytes.len() as u64;
                        sink.data(bytes)
                    }
                    Extent::Zeros(len) => sink.zeros(*len),
                }
            });
            progress.reached(done >> 20, size.div_ceil(1 << 20));
            futures::future::ready(result.map_err(|e| format!("writing at byte {done}: {e}")))
        })
        .await;
    progress.finish();
    copied?;
    sink.finish(size).map_err(|e| format!("finishing: {e}"))?;
    Ok(Moved {
        size,
        stored,
        seconds: started.elapsed().as_secs_f64(),
    })
}
