//! Test support for the report tests, so that they check the files the way a
//! reader would, without extra crates: an XML well-formedness checker (for
//! the SVG plots) and a PNG decoder (chunk CRCs, zlib inflate with its
//! Adler-32, scanline filters), after RFC 1950, 1951 and the PNG spec.
#![allow(dead_code)]

/// Check that `text` is one well-formed XML document; returns the element
/// names in document order.
pub fn check_xml(text: &str) -> Result<Vec<String>, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut stack: Vec<String> = Vec::new();
    let mut names = Vec::new();
    let mut roots = 0;
    let is_name = |c: u8, first: bool| {
        c.is_ascii_alphabetic() || c == b'_' || c == b':' || (!first && (c.is_ascii_digit() || c == b'-' || c == b'.'))
    };
    let find = |from: usize, pat: &str| {
        text[from..].find(pat).map(|p| from + p).ok_or(format!("unclosed {pat} after byte {from}"))
    };
    while i < b.len() {
        if b[i] != b'<' {
            let end = text[i..].find('<').map_or(b.len(), |p| i + p);
            check_text(&text[i..end])?;
            if stack.is_empty() && !text[i..end].trim().is_empty() {
                return Err(format!("text outside the root element at byte {i}"));
            }
            i = end;
            continue;
        }
        let rest = &text[i..];
        if rest.starts_with("<?") {
            i = find(i, "?>")? + 2;
        } else if rest.starts_with("<!--") {
            i = find(i, "-->")? + 3;
        } else if rest.starts_with("<![CDATA[") {
            i = find(i, "]]>")? + 3;
        } else if rest.starts_with("<!DOCTYPE") {
            i = find(i, ">")? + 1;
        } else if rest.starts_with("</") {
            let end = find(i, ">")?;
            let name = text[i + 2..end].trim();
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("</{name}> closes {other:?} at byte {i}")),
            }
            i = end + 1;
        } else {
            let mut j = i + 1;
            if j >= b.len() || !is_name(b[j], true) {
                return Err(format!("bad tag at byte {i}"));
            }
            while j < b.len() && is_name(b[j], false) {
                j += 1;
            }
            let name = text[i + 1..j].to_string();
            if stack.is_empty() {
                roots += 1;
            }
            let mut attrs: Vec<String> = Vec::new();
            loop {
                let ws = j;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                match b.get(j) {
                    Some(b'>') => {
                        stack.push(name.clone());
                        j += 1;
                        break;
                    }
                    Some(b'/') if b.get(j + 1) == Some(&b'>') => {
                        j += 2;
                        break;
                    }
                    Some(&c) if is_name(c, true) && j > ws => {
                        let a = j;
                        while j < b.len() && is_name(b[j], false) {
                            j += 1;
                        }
                        let attr = text[a..j].to_string();
                        if attrs.contains(&attr) {
                            return Err(format!("attribute {attr} twice in <{name}>"));
                        }
                        attrs.push(attr);
                        if b.get(j) != Some(&b'=') {
                            return Err(format!("attribute without value in <{name}> at byte {j}"));
                        }
                        let q = *b.get(j + 1).ok_or("cut attribute")?;
                        if q != b'"' && q != b'\'' {
                            return Err(format!("unquoted attribute in <{name}> at byte {j}"));
                        }
                        let close =
                            text[j + 2..].find(q as char).map(|p| j + 2 + p).ok_or("unclosed attribute value")?;
                        let value = &text[j + 2..close];
                        if value.contains('<') {
                            return Err(format!("'<' in an attribute of <{name}>"));
                        }
                        check_text(value)?;
                        j = close + 1;
                    }
                    _ => return Err(format!("bad character in <{name}> at byte {j}")),
                }
            }
            names.push(name);
            i = j;
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("<{open}> never closed"));
    }
    if roots != 1 {
        return Err(format!("{roots} root elements"));
    }
    Ok(names)
}

/// Character data: `&` only as an entity reference.
fn check_text(t: &str) -> Result<(), String> {
    let mut rest = t;
    while let Some(p) = rest.find('&') {
        let after = &rest[p + 1..];
        let end = after.find(';').ok_or(format!("bare & in {t:?}"))?;
        let ent = &after[..end];
        let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
            || ent.strip_prefix("#x").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            || ent.strip_prefix('#').is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(format!("unknown entity &{ent};"));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// A decoded 8-bit PNG: one byte per channel, rows top to bottom.
pub struct Png {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub pixels: Vec<u8>,
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &byte in data {
        c ^= u32::from(byte);
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decode a PNG of bit depth 8 without interlacing, checking every CRC and
/// the zlib checksum.
pub fn decode_png(bytes: &[u8]) -> Result<Png, String> {
    if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Err("no PNG signature".into());
    }
    let (mut pos, mut idat, mut header, mut ended) = (8, Vec::new(), None, false);
    while pos + 12 <= bytes.len() && !ended {
        let len = be32(&bytes[pos..]) as usize;
        let body = bytes.get(pos + 4..pos + 8 + len).ok_or("cut chunk")?;
        let crc = be32(bytes.get(pos + 8 + len..pos + 12 + len).ok_or("cut CRC")?);
        if crc32(body) != crc {
            return Err(format!("bad CRC in chunk {:?}", String::from_utf8_lossy(&body[..4])));
        }
        match &body[..4] {
            b"IHDR" => {
                header = Some((be32(&body[4..]) as usize, be32(&body[8..]) as usize, body[12], body[13], body[16]))
            }
            b"IDAT" => idat.extend_from_slice(&body[4..]),
            b"IEND" => ended = true,
            _ => {}
        }
        pos += 12 + len;
    }
    let (width, height, depth, colour, interlace) = header.ok_or("no IHDR")?;
    if !ended || depth != 8 || interlace != 0 {
        return Err(format!("unsupported: IEND {ended}, depth {depth}, interlace {interlace}"));
    }
    let channels = match colour {
        0 => 1,
        2 => 3,
        4 => 2,
        6 => 4,
        c => return Err(format!("colour type {c}")),
    };
    if idat.len() < 6
        || (u32::from(idat[0]) * 256 + u32::from(idat[1])) % 31 != 0
        || idat[0] & 0x0F != 8
        || idat[1] & 0x20 != 0
    {
        return Err("bad zlib header".into());
    }
    let raw = inflate(&idat[2..idat.len() - 4])?;
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    if (b << 16 | a) != be32(&idat[idat.len() - 4..]) {
        return Err("bad Adler-32".into());
    }
    let stride = width * channels;
    if raw.len() != height * (stride + 1) {
        return Err(format!("{} bytes of scanlines for {width}×{height}×{channels}", raw.len()));
    }
    let mut pixels = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        for x in 0..stride {
            let v = raw[y * (stride + 1) + 1 + x];
            let left = if x >= channels { pixels[y * stride + x - channels] } else { 0 };
            let up = if y > 0 { pixels[(y - 1) * stride + x] } else { 0 };
            let ul = if y > 0 && x >= channels { pixels[(y - 1) * stride + x - channels] } else { 0 };
            let pred = match filter {
                0 => 0,
                1 => left,
                2 => up,
                3 => ((u16::from(left) + u16::from(up)) / 2) as u8,
                4 => {
                    let p = i16::from(left) + i16::from(up) - i16::from(ul);
                    let (pa, pb, pc) =
                        ((p - i16::from(left)).abs(), (p - i16::from(up)).abs(), (p - i16::from(ul)).abs());
                    if pa <= pb && pa <= pc {
                        left
                    } else if pb <= pc {
                        up
                    } else {
                        ul
                    }
                }
                f => return Err(format!("filter {f} in row {y}")),
            };
            pixels[y * stride + x] = v.wrapping_add(pred);
        }
    }
    Ok(Png { width, height, channels, pixels })
}

struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    buf: u32,
    cnt: u32,
}

impl Bits<'_> {
    fn need(&mut self, n: u32) -> Result<u32, String> {
        while self.cnt < n {
            let byte = *self.data.get(self.pos).ok_or("deflate stream cut short")?;
            self.buf |= u32::from(byte) << self.cnt;
            self.cnt += 8;
            self.pos += 1;
        }
        let v = self.buf & ((1u32 << n) - 1);
        self.buf >>= n;
        self.cnt -= n;
        Ok(v)
    }
}

/// Canonical Huffman code: code-length counts and symbols by code.
struct Huffman {
    counts: [i32; 16],
    symbols: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> Huffman {
        let mut counts = [0i32; 16];
        lengths.iter().for_each(|&l| counts[l as usize] += 1);
        counts[0] = 0;
        let mut offs = [0usize; 16];
        for l in 1..15 {
            offs[l + 1] = offs[l] + counts[l] as usize;
        }
        let mut symbols = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbols[offs[l as usize]] = s as u16;
                offs[l as usize] += 1;
            }
        }
        Huffman { counts, symbols }
    }

    fn decode(&self, bits: &mut Bits<'_>) -> Result<u16, String> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= bits.need(1)? as i32;
            let count = self.counts[len];
            if code - count < first {
                return Ok(self.symbols[(index + code - first) as usize]);
            }
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
        Err("bad Huffman code".into())
    }
}

const LBASE: [u16; 29] =
    [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LEXT: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DBASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
    8193, 12289, 16385, 24577,
];
const DEXT: [u8; 30] =
    [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];

/// Inflate a raw deflate stream.
pub fn inflate(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut bits = Bits { data, pos: 0, buf: 0, cnt: 0 };
    let mut out: Vec<u8> = Vec::new();
    loop {
        let last = bits.need(1)?;
        match bits.need(2)? {
            0 => {
                bits.buf = 0;
                bits.cnt = 0;
                let p = bits.pos;
                let head = data.get(p..p + 4).ok_or("cut stored block")?;
                let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
                if u16::from_le_bytes([head[2], head[3]]) != !(len as u16) {
                    return Err("stored block length check".into());
                }
                out.extend_from_slice(data.get(p + 4..p + 4 + len).ok_or("cut stored block")?);
                bits.pos = p + 4 + len;
            }
            kind @ (1 | 2) => {
                let (lit, dist) = if kind == 1 {
                    let mut l = [8u8; 288];
                    l[144..256].iter_mut().for_each(|x| *x = 9);
                    l[256..280].iter_mut().for_each(|x| *x = 7);
                    (Huffman::new(&l), Huffman::new(&[5u8; 30]))
                } else {
                    dynamic_tables(&mut bits)?
                };
                loop {
                    let sym = lit.decode(&mut bits)? as usize;
                    if sym < 256 {
                        out.push(sym as u8);
                    } else if sym == 256 {
                        break;
                    } else {
                        let s = sym - 257;
                        let len = usize::from(*LBASE.get(s).ok_or("bad length symbol")?)
                            + bits.need(u32::from(LEXT[s]))? as usize;
                        let d = lit_dist(&dist, &mut bits)?;
                        if d > out.len() {
                            return Err("distance too far back".into());
                        }
                        for _ in 0..len {
                            out.push(out[out.len() - d]);
                        }
                    }
                }
            }
            _ => return Err("block type 3".into()),
        }
        if last == 1 {
            return Ok(out);
        }
    }
}

fn lit_dist(dist: &Huffman, bits: &mut Bits<'_>) -> Result<usize, String> {
    let s = dist.decode(bits)? as usize;
    Ok(usize::from(*DBASE.get(s).ok_or("bad distance symbol")?) + bits.need(u32::from(DEXT[s]))? as usize)
}

fn dynamic_tables(bits: &mut Bits<'_>) -> Result<(Huffman, Huffman), String> {
    const ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
    let nlen = bits.need(5)? as usize + 257;
    let ndist = bits.need(5)? as usize + 1;
    let ncode = bits.need(4)? as usize + 4;
    let mut cl = [0u8; 19];
    for &o in ORDER.iter().take(ncode) {
        cl[o] = bits.need(3)? as u8;
    }
    let clh = Huffman::new(&cl);
    let mut lengths: Vec<u8> = Vec::with_capacity(nlen + ndist);
    while lengths.len() < nlen + ndist {
        let sym = clh.decode(bits)?;
        let (value, times) = match sym {
            0..=15 => (sym as u8, 1),
            16 => (*lengths.last().ok_or("repeat with no previous length")?, 3 + bits.need(2)?),
            17 => (0, 3 + bits.need(3)?),
            _ => (0, 11 + bits.need(7)?),
        };
        lengths.extend(std::iter::repeat_n(value, times as usize));
    }
    if lengths.len() != nlen + ndist {
        return Err("code lengths overrun".into());
    }
    Ok((Huffman::new(&lengths[..nlen]), Huffman::new(&lengths[nlen..])))
}
