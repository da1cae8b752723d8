//! The image-processing chain (ServerlessBench TC4; CPU-bound): extract the metadata of an
//! image in remote memory → transform it (the thumbnail's size) → handler (checks the
//! request) → thumbnail (decode, resize, encode as PNG) → store (the thumbnail left in remote
//! memory) and respond.
//!
//! Images and thumbnails in remote memory are length-prefixed (8 bytes, then the encoded
//! file), since an object may be longer than what it holds. The image is read once, by the
//! first function, into the container's local memory; the later functions use that copy.

use crate::chain::{Chain, ChainCtx, Datum, Input, Invocation, read_chunked, write_chunked};
use crate::error::FaasError;
use image::{ImageFormat, ImageReader};
use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::{MemError, Region, RemoteMemory};
use std::io::Cursor;
use std::time::Duration;

/// The largest image accepted, in pixels (the decoder's buffer is four bytes a pixel).
pub const MAX_PIXELS: u64 = 64 << 20;
/// The default bound of the thumbnail's longer side.
pub const DEFAULT_SIDE: u32 = 128;

/// What the chain responds: the image's metadata, and the thumbnail it left in remote memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thumbnailed {
    /// The image's width and height.
    pub size: (u32, u32),
    /// The thumbnail's width and height.
    pub thumbnail_size: (u32, u32),
    /// The thumbnail (a length-prefixed PNG) in remote memory.
    pub thumbnail: Datum,
}

impl Thumbnailed {
    fn encode(&self) -> Vec<u8> {
        [
            u64::from(self.size.0),
            u64::from(self.size.1),
            u64::from(self.thumbnail_size.0),
            u64::from(self.thumbnail_size.1),
            self.thumbnail.addr,
            self.thumbnail.len,
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
    }

    /// The response of a chain.
    pub fn decode(b: &[u8]) -> Option<Thumbnailed> {
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                b.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        let small = |i: usize| w(i).and_then(|v| u32::try_from(v).ok());
        Some(Thumbnailed {
            size: (small(0)?, small(1)?),
            thumbnail_size: (small(2)?, small(3)?),
            thumbnail: Datum {
                addr: w(4)?,
                len: w(5)?,
            },
        })
    }
}

/// The invocation making a thumbnail of at most `side` × `side` of the image at `image`.
pub fn invocation(image: Datum, side: u32) -> Invocation {
    Invocation {
        inputs: vec![Input::read(image)],
        payload: side.to_le_bytes().to_vec(),
    }
}

/// Puts an encoded image into remote memory (a new shared object; the creator's right is
/// given up).
pub fn upload<M: RemoteMemory>(mem: &mut M, file: &[u8]) -> Result<Datum, FaasError> {
    let mut bytes = (file.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(file);
    let mut objects = mem.allocate(&[bytes.len() as u64], Duration::from_secs(1), Mode::Shared)?;
    let r = objects
        .pop()
        .ok_or(FaasError::Memory(MemError::Exhausted))?;
    let datum = Datum {
        addr: r.addr(),
        len: r.len(),
    };
    if let Err(e) = write_chunked(mem, &r, 0, &bytes) {
        let _ = mem.free(r);
        return Err(e);
    }
    let _ = mem.release(r);
    Ok(datum)
}

/// Reads a length-prefixed file (an uploaded image, a thumbnail) from remote memory through
/// a right of the reader's own.
pub fn fetch<M: RemoteMemory>(mem: &mut M, at: Datum) -> Result<Vec<u8>, FaasError> {
    let r = mem.acquire(
        at.addr,
        at.len,
        Duration::from_secs(1),
        Access::Read,
        Mode::Shared,
    )?;
    let result = read_prefixed(mem, &r, at.len);
    let _ = mem.release(r);
    result
}

fn read_prefixed<M: RemoteMemory>(
    mem: &mut M,
    r: &M::Region,
    object_len: u64,
) -> Result<Vec<u8>, FaasError> {
    let head = mem.read(r, 0, 8)?;
    let len = u64::from_le_bytes(head.try_into().unwrap_or_default());
    if len + 8 > object_len || len > u64::from(u32::MAX) {
        return Err(FaasError::BadInput(format!(
            "a file of {len} bytes in an object of {object_len}"
        )));
    }
    read_chunked(mem, r, 8, len as u32)
}

/// The image chain (see the module docs): extract reads the image and its size, transform
/// computes the thumbnail's size, handler checks the request, thumbnail decodes, resizes and
/// encodes it, store leaves it in a new object (whose size is known only once it is encoded).
pub fn chain<M: RemoteMemory>() -> Chain<M> {
    Chain {
        name: "image",
        functions: vec![
            ("extract", extract::<M>),
            ("transform", transform::<M>),
            ("handler", handler::<M>),
            ("thumbnail", thumbnail::<M>),
            ("store", store::<M>),
        ],
        // The thumbnail's size is known once it is encoded.
        output_reserve: None,
    }
}

/// Metadata passed between the functions: width, height, requested side, then the
/// thumbnail's width and height once computed.
fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes_of(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Reads the image into local memory and its header: (width, height, side).
fn extract<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let side = *words(&p)
        .first()
        .ok_or_else(|| FaasError::BadInput("no thumbnail size".into()))?;
    let len = ctx.input(0)?.len;
    let head = ctx.read(0, 0, 8)?;
    let n = u64::from_le_bytes(head.try_into().unwrap_or_default());
    if n + 8 > len || n > u64::from(u32::MAX) {
        return Err(FaasError::BadInput(format!(
            "an image of {n} bytes in {len}"
        )));
    }
    let file = ctx.read(0, 8, n as u32)?;
    let (w, h) = ImageReader::new(Cursor::new(&file))
        .with_guessed_format()
        .map_err(|e| FaasError::BadInput(format!("reading the image: {e}")))?
        .into_dimensions()
        .map_err(|e| FaasError::BadInput(format!("not an image: {e}")))?;
    ctx.keep("image", file);
    Ok(bytes_of(&[w, h, side]))
}

/// The thumbnail's size: the image scaled to fit `side` × `side`, keeping its aspect.
fn transform<M: RemoteMemory>(_: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let [w, h, side] = words(&p)[..] else {
        return Err(FaasError::BadInput("metadata".into()));
    };
    let scale = f64::from(side) / f64::from(w.max(h).max(1));
    let fit = |x: u32| ((f64::from(x) * scale).round() as u32).max(1);
    let (tw, th) = if scale >= 1.0 {
        (w, h)
    } else {
        (fit(w), fit(h))
    };
    Ok(bytes_of(&[w, h, side, tw, th]))
}

/// Checks the request before the expensive step.
fn handler<M: RemoteMemory>(_: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let [w, h, side, ..] = words(&p)[..] else {
        return Err(FaasError::BadInput("metadata".into()));
    };
    if side == 0 {
        return Err(FaasError::BadInput("a thumbnail of size 0".into()));
    }
    if w == 0 || h == 0 || u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(FaasError::BadInput(format!(
            "an image of {w} × {h} (at most {MAX_PIXELS} pixels)"
        )));
    }
    Ok(p)
}

/// Decodes the image, resizes it (Lanczos), encodes the thumbnail as PNG, keeps it locally.
fn thumbnail<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let [_, _, _, tw, th] = words(&p)[..] else {
        return Err(FaasError::BadInput("metadata".into()));
    };
    let file = ctx
        .kept("image")
        .ok_or_else(|| FaasError::BadInput("no image read".into()))?;
    let img = image::load_from_memory(file)
        .map_err(|e| FaasError::BadInput(format!("decoding the image: {e}")))?;
    let small = img.resize_exact(tw, th, image::imageops::FilterType::Lanczos3);
    let mut png = Vec::new();
    small
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|e| FaasError::BadInput(format!("encoding the thumbnail: {e}")))?;
    ctx.keep("thumbnail", png);
    Ok(p)
}

/// Leaves the thumbnail in remote memory; responds with the metadata and where it is.
fn store<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let [w, h, _, tw, th] = words(&p)[..] else {
        return Err(FaasError::BadInput("metadata".into()));
    };
    let png = ctx
        .kept("thumbnail")
        .ok_or_else(|| FaasError::BadInput("no thumbnail made".into()))?;
    let mut out = (png.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(png);
    let thumbnail = ctx.output(&out)?;
    Ok(Thumbnailed {
        size: (w, h),
        thumbnail_size: (tw, th),
        thumbnail,
    }
    .encode())
}
