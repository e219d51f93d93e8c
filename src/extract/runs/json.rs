//! A cursor over one JSON text already known to be valid: values read or
//! skipped whole, never parsed into a tree.

use std::borrow::Cow;

/// A cursor over one JSON text known to be valid.
pub(super) struct Scan<'a> {
    pub b: &'a [u8],
    pub i: usize,
}

/// Strings searched byte by byte up to this length.
const SHORT: usize = 16;

impl<'a> Scan<'a> {
    pub fn new(b: &'a [u8], i: usize) -> Self {
        Scan { b, i }
    }

    pub fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Whether the next value starts with `c`.
    pub fn at(&mut self, c: u8) -> bool {
        self.ws();
        self.b.get(self.i) == Some(&c)
    }

    pub fn eat(&mut self, c: u8) -> Option<()> {
        self.at(c).then(|| self.i += 1)
    }

    /// A string's raw bytes (escapes as they are), the cursor after it.
    pub fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        // Keys and most short values end within a few bytes: looked for
        // one by one there, before a vector search's setup pays.
        for k in start..self.b.len().min(start + SHORT) {
            match self.b[k] {
                b'"' => {
                    self.i = k + 1;
                    return Some(&self.b[start..k]);
                }
                b'\\' => break,
                _ => {}
            }
        }
        let mut j = start;
        loop {
            let k = j + memchr::memchr2(b'"', b'\\', self.b.get(j..)?)?;
            if self.b[k] == b'\\' {
                j = k + 2;
                continue;
            }
            self.i = k + 1;
            return Some(&self.b[start..k]);
        }
    }

    /// A string value as text; `None` (and skipped) for any other value.
    pub fn text(&mut self) -> Option<Cow<'a, str>> {
        if !self.at(b'"') {
            self.skip();
            return None;
        }
        let start = self.i;
        let raw = self.raw_string()?;
        if !raw.contains(&b'\\') {
            return std::str::from_utf8(raw).ok().map(Cow::Borrowed);
        }
        serde_json::from_slice::<String>(&self.b[start..self.i])
            .ok()
            .map(Cow::Owned)
    }

    /// A non-negative integer value; `None` (and skipped) for any other.
    pub fn number(&mut self) -> Option<u64> {
        self.ws();
        let start = self.i;
        self.skip()?;
        std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// A finite number value; `None` (and skipped) for any other.
    pub fn float(&mut self) -> Option<f64> {
        self.ws();
        let start = self.i;
        self.skip()?;
        let text = std::str::from_utf8(&self.b[start..self.i]).ok()?.trim();
        match text.as_bytes().first() {
            Some(b'-' | b'0'..=b'9') => text.parse().ok().filter(|f: &f64| f.is_finite()),
            _ => None,
        }
    }

    /// Whether the value is `true` (any value is consumed).
    pub fn truth(&mut self) -> bool {
        self.ws();
        let yes = self.b[self.i..].starts_with(b"true");
        let _ = self.skip();
        yes
    }

    /// Calls `each` at every element of an array (`each` consumes it);
    /// any other value is skipped and has none.
    pub fn array(&mut self, each: &mut dyn FnMut(&mut Scan<'a>) -> Option<()>) -> Option<()> {
        if !self.at(b'[') {
            return self.skip();
        }
        self.i += 1;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            each(self)?;
            if self.eat(b',').is_none() {
                return self.eat(b']');
            }
        }
    }

    /// Calls `each` with every key of an object; `each` consumes the value.
    pub fn object(
        &mut self,
        each: &mut dyn FnMut(&[u8], &mut Scan<'a>) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.raw_string()?;
            self.eat(b':')?;
            each(key, self)?;
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// Skips one value whole.
    pub fn skip(&mut self) -> Option<()> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.raw_string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0u32;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.raw_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    // A count, not a recursion: any depth is skipped.
                    self.i += 1;
                }
            }
            _ => {
                while !matches!(
                    self.b.get(self.i),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
                Some(())
            }
        }
    }
}
