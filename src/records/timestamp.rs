//! Record timestamps: parsing RFC 3339 text and epoch numbers into UTC
//! microseconds, and formatting them back as RFC 3339 UTC.
//!
//! This runs once per record on the counting hot path, so it is a small
//! hand-written parser over bytes rather than a general date library.

/// Microseconds since the Unix epoch, UTC.
pub type Micros = i64;

/// Epoch numbers at or above this magnitude are milliseconds, below it
/// seconds. 1e11 seconds is the year 5138; 1e11 milliseconds is 1973.
const MILLIS_THRESHOLD: f64 = 1e11;

/// Parses an epoch number (seconds or milliseconds, see
/// [`MILLIS_THRESHOLD`]) into microseconds. Non-finite or out-of-range
/// values give `None`.
pub fn from_epoch(value: f64) -> Option<Micros> {
    if !value.is_finite() {
        return None;
    }
    let micros = if value.abs() >= MILLIS_THRESHOLD {
        value * 1_000.0
    } else {
        value * 1_000_000.0
    };
    // Keep within years 0000..=9999 so formatting always succeeds.
    const MIN: f64 = -62_167_219_200_000_000.0;
    const MAX: f64 = 253_402_300_799_999_999.0;
    (MIN..=MAX)
        .contains(&micros)
        .then(|| micros.round() as Micros)
}

/// Parses RFC 3339 (`2026-01-01T00:00:00Z`, `…T00:00:00.5+02:00`; a space
/// or lowercase `t` separator and `z` are accepted). Fractions beyond
/// microseconds are truncated. Returns `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<Micros> {
    parse_rfc3339_bytes(text.as_bytes())
}

/// [`parse_rfc3339`] over bytes (anything non-ASCII is rejected).
pub fn parse_rfc3339_bytes(b: &[u8]) -> Option<Micros> {
    parse_rfc3339_remembering(b, &mut DayMemo::default())
}

/// The last month [`parse_rfc3339_remembering`] met: the records of one
/// file mostly fall in one month, so its calendar arithmetic is done once
/// per month rather than once per record (a file whose dates change every
/// record still pays only a compare and two digits for the day).
#[derive(Debug, Default, Clone)]
pub struct DayMemo {
    /// `YYYY-MM` as it was written, the days since the epoch of its first
    /// day, and how many days it has.
    month: [u8; 7],
    first: Option<(i64, u32)>,
}

impl DayMemo {
    /// The days since the epoch of `date` (`YYYY-MM-DD`), `None` if it is
    /// not a valid date.
    fn days(&mut self, date: &[u8; 10]) -> Option<i64> {
        let day = two_digits(date, 8)?;
        if date[7] != b'-' {
            return None;
        }
        let (first, len) = match self.first {
            Some(known) if self.month == date[..7] => known,
            _ => self.learn(date)?,
        };
        (1..=len).contains(&day).then(|| first + i64::from(day) - 1)
    }

    /// The first day and the length of `date`'s month, remembered.
    fn learn(&mut self, date: &[u8; 10]) -> Option<(i64, u32)> {
        let year = digits(date, 0, 4)?;
        let month = two_digits(date, 5)?;
        if date[4] != b'-' || !(1..=12).contains(&month) {
            return None;
        }
        let known = (
            days_from_civil(i64::from(year), month, 1),
            days_in_month(year, month),
        );
        self.month.copy_from_slice(&date[..7]);
        self.first = Some(known);
        Some(known)
    }
}

/// [`parse_rfc3339_bytes`], its month looked up in (and remembered by)
/// `memo`.
pub fn parse_rfc3339_remembering(b: &[u8], memo: &mut DayMemo) -> Option<Micros> {
    // `YYYY-MM-DDTHH:MM:SS` and at least a `Z`: fixed places from here.
    let head: &[u8; 20] = b.get(..20)?.try_into().ok()?;
    let days = memo.days(head[..10].try_into().ok()?)?;
    if !matches!(head[10], b'T' | b't' | b' ') {
        return None;
    }
    let (hour, minute, second) = clock(head[11..19].try_into().ok()?)?;
    let mut pos = 19;
    let mut micros_frac: i64 = 0;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            if pos - start < 6 {
                micros_frac = micros_frac * 10 + i64::from(b[pos] - b'0');
            }
            pos += 1;
        }
        let len = pos - start;
        if len == 0 {
            return None;
        }
        for _ in len..6 {
            micros_frac *= 10;
        }
    }
    let offset_secs: i64 = match b.get(pos)? {
        b'Z' | b'z' if pos + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if pos + 6 == b.len() && b[pos + 3] == b':' => {
            let oh = digits(b, pos + 1, 2)?;
            let om = digits(b, pos + 4, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let off = i64::from(oh) * 3600 + i64::from(om) * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)
        - offset_secs;
    Some(secs * 1_000_000 + micros_frac)
}

/// Formats microseconds as RFC 3339 UTC: `YYYY-MM-DDTHH:MM:SSZ`, with a
/// fraction (`.ffffff`, trailing zeros trimmed) only when it is non-zero.
pub fn format_rfc3339(micros: Micros) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    );
    if frac != 0 {
        let digits = format!("{frac:06}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

fn digits(b: &[u8], start: usize, len: usize) -> Option<u32> {
    let slice = b.get(start..start + len)?;
    let mut value = 0u32;
    for &c in slice {
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(c - b'0');
    }
    Some(value)
}

/// `HH:MM:SS` as hour, minute and second, `None` unless it is a time of
/// day (a second of 60 admits a leap second, folded into the next
/// minute). All eight bytes are checked and read as one word.
#[inline(always)]
fn clock(text: &[u8; 8]) -> Option<(u32, u32, u32)> {
    // Byte `i` of the text is byte `i` of the word: digits at 0, 1, 3, 4,
    // 6 and 7, colons at 2 and 5.
    const DIGITS: u64 = 0xffff_00ff_ff00_ffff;
    const HIGH_NIBBLES: u64 = 0xf0f0_00f0_f000_f0f0;
    let word = u64::from_le_bytes(*text);
    let low = word & DIGITS & 0x0f0f_0f0f_0f0f_0f0f;
    // A digit is 0x30 to 0x39: its high nibble 3, and its low one below
    // 10 (adding 6 carries out of no low nibble; no byte carries into
    // the next, each staying below 0x10 + 6).
    let digits = (word & HIGH_NIBBLES) == 0x3030_0030_3000_3030
        && ((low + 0x0606_0006_0600_0606) & HIGH_NIBBLES) == 0;
    if !digits || (word & !DIGITS) != 0x0000_3a00_003a_0000 {
        return None;
    }
    // Each pair's tens times ten plus its ones, in the tens' byte.
    let pairs = low * 10 + (low >> 8);
    let (hour, minute, second) = (
        (pairs & 0xff) as u32,
        ((pairs >> 24) & 0xff) as u32,
        ((pairs >> 48) & 0xff) as u32,
    );
    (hour <= 23 && minute <= 59 && second <= 60).then_some((hour, minute, second))
}

/// The two ASCII digits at `at` as a number, `None` unless both are digits.
#[inline(always)]
fn two_digits(b: &[u8], at: usize) -> Option<u32> {
    let (tens, ones) = (b[at].wrapping_sub(b'0'), b[at + 1].wrapping_sub(b'0'));
    (tens < 10 && ones < 10).then(|| u32::from(tens) * 10 + u32::from(ones))
}

fn is_leap(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// well-known civil calendar algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_and_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("1969-12-31T23:00:00-01:00"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-01-01 00:00:00.25z"),
            Some(1_767_225_600_250_000)
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T12:00:00.123456789Z"),
            Some(951_825_600_123_456)
        );
    }

    #[test]
    fn a_remembered_date_parses_as_a_fresh_one() {
        let mut memo = DayMemo::default();
        for text in [
            "2026-01-01T00:00:00Z",
            "2026-01-01T23:59:59.5+02:00",
            "2026-02-30T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2024-02-29T12:00:00Z",
            "2024-02-29T12:00:01Z",
            "2026-01-01 00:00:00z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00Z",
        ] {
            assert_eq!(
                parse_rfc3339_remembering(text.as_bytes(), &mut memo),
                parse_rfc3339(text),
                "{text}"
            );
        }
    }

    /// Every day of two centuries, parsed with one memo as a file whose
    /// date changes each record is, and the days around each month's end
    /// (valid or not) right after its month was remembered.
    #[test]
    fn a_remembered_month_gives_every_day_its_own_number() {
        let mut memo = DayMemo::default();
        let (first, last) = (days_from_civil(1899, 12, 1), days_from_civil(2101, 1, 31));
        for days in first..=last {
            let (year, month, day) = civil_from_days(days);
            let text = format!("{year:04}-{month:02}-{day:02}T01:02:03Z");
            let want = (days * 86_400 + 3_723) * 1_000_000;
            assert_eq!(
                parse_rfc3339_remembering(text.as_bytes(), &mut memo),
                Some(want),
                "{text}"
            );
            if day == 1 {
                let len = days_in_month(year as u32, month);
                for probe in [0, len - 1, len, len + 1, 31, 32, 99] {
                    let text = format!("{year:04}-{month:02}-{probe:02}T00:00:00Z");
                    let remembered = parse_rfc3339_remembering(text.as_bytes(), &mut memo);
                    let valid = (1..=len).contains(&probe);
                    assert_eq!(remembered.is_some(), valid, "{text}");
                    assert_eq!(remembered, parse_rfc3339(&text), "{text}");
                }
            }
        }
        for bad in [
            "2026-1a-01T00:00:00Z",
            "2026-01-0aT00:00:00Z",
            "2026-01/01T00:00:00Z",
        ] {
            assert_eq!(
                parse_rfc3339_remembering(bad.as_bytes(), &mut memo),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+0100",
            "2026-01-01T00:00:00Zjunk",
            "２０２６-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    /// [`clock`] against a byte at a time: every time of day, and every
    /// byte value at every place of a few.
    #[test]
    fn the_clock_read_as_one_word_is_read_byte_by_byte() {
        fn by_bytes(t: &[u8; 8]) -> Option<(u32, u32, u32)> {
            let (hour, minute, second) = (two_digits(t, 0)?, two_digits(t, 3)?, two_digits(t, 6)?);
            (t[2] == b':' && t[5] == b':' && hour <= 23 && minute <= 59 && second <= 60)
                .then_some((hour, minute, second))
        }
        let mut valid = 0;
        for hour in 0..100 {
            for minute in 0..100 {
                for second in [0, 9, 10, 59, 60, 61, 99] {
                    let text = format!("{hour:02}:{minute:02}:{second:02}");
                    let t: &[u8; 8] = text.as_bytes().try_into().unwrap();
                    assert_eq!(clock(t), by_bytes(t), "{text}");
                    valid += usize::from(clock(t).is_some());
                }
            }
        }
        assert_eq!(valid, 24 * 60 * 5);
        for base in [*b"00:00:00", *b"23:59:60", *b"19:09:59", *b"09:50:01"] {
            for at in 0..8 {
                for byte in 0..=255u8 {
                    let mut t = base;
                    t[at] = byte;
                    assert_eq!(clock(&t), by_bytes(&t), "{t:?}");
                }
            }
        }
    }

    #[test]
    fn formats_round_trip() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2026-09-07T01:00:00Z",
            "1969-07-20T20:17:40.5Z",
            "2400-02-29T23:59:59.999999Z",
            "0001-01-01T00:00:00Z",
        ] {
            assert_eq!(format_rfc3339(parse_rfc3339(text).unwrap()), text);
        }
    }

    #[test]
    fn epoch_seconds_and_millis() {
        assert_eq!(from_epoch(1_767_225_600.0), Some(1_767_225_600_000_000));
        assert_eq!(from_epoch(1_767_225_600_000.0), Some(1_767_225_600_000_000));
        assert_eq!(from_epoch(1.5), Some(1_500_000));
        assert_eq!(from_epoch(f64::NAN), None);
        assert_eq!(from_epoch(1e30), None);
    }
}
