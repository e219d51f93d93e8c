//! Keys a listing cannot show, taken out of a `ListObjectsV2` page before
//! the object store parses it.
//!
//! Object storage accepts any UTF-8 key, and anyone who may write to the
//! bucket chooses them. `object_store` turns every key of a page into a
//! path and fails the whole listing on the first that is not one (an empty
//! component, as in `a//b`; a `.` or `..` component; an ASCII control
//! character). One such key would hide its directory, and at the
//! warehouse's root the whole warehouse. It also reads a key with a
//! leading `/` as the key without it, so `/wh/x` would pass for `wh/x`.
//! (Spaces around a key are kept: a test below pins that.)
//!
//! So each page is read here first, and every `<Contents>` and
//! `<CommonPrefixes>` entry whose key is not exactly a path is cut out of
//! the page, byte for byte, leaving the rest as the server sent it. The
//! local side skips names it cannot show in the same spirit.

use std::ops::Range;

use quick_xml::events::Event;
use quick_xml::reader::Reader;

/// The page without the entries whose keys cannot be paths, and those
/// keys; `None` when every key can stay (or the page is not a listing
/// this reads: the object store then reports what is wrong with it).
pub(crate) fn drop_unusable_keys(page: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    let mut reader = Reader::from_reader(page);
    let mut depth = 0usize;
    // The entry being read: where it starts, and its key so far (`None`
    // once a part of the key could not be read).
    let mut entry: Option<(usize, Option<String>)> = None;
    let mut in_key = false;
    let mut cuts: Vec<(Range<usize>, String)> = Vec::new();
    loop {
        let start = usize::try_from(reader.buffer_position()).ok()?;
        let event = reader.read_event().ok()?;
        let key = entry.as_mut().filter(|_| in_key).map(|(_, key)| key);
        match event {
            Event::Start(tag) => {
                depth += 1;
                let name = tag.local_name();
                match (depth, name.as_ref()) {
                    (2, b"Contents" | b"CommonPrefixes") => {
                        entry = Some((start, Some(String::new())));
                    }
                    (3, b"Key" | b"Prefix") if entry.is_some() => in_key = true,
                    _ => {}
                }
            }
            Event::End(_) => {
                in_key = false;
                if depth == 2 {
                    if let Some((first, key)) = entry.take() {
                        let end = usize::try_from(reader.buffer_position()).ok()?;
                        match key {
                            Some(key) if is_path(&key) => {}
                            key => cuts.push((first..end, key.unwrap_or_default())),
                        }
                    }
                }
                depth = depth.checked_sub(1)?;
            }
            Event::Text(text) => {
                if let Some(key) = key {
                    append(key, text.decode().ok().as_deref());
                }
            }
            Event::CData(data) => {
                if let Some(key) = key {
                    append(key, data.decode().ok().as_deref());
                }
            }
            Event::GeneralRef(reference) => {
                if let Some(key) = key {
                    let resolved = match reference.resolve_char_ref() {
                        Ok(Some(c)) => Some(c.to_string()),
                        Ok(None) => reference.decode().ok().and_then(|name| {
                            quick_xml::escape::resolve_predefined_entity(&name).map(str::to_string)
                        }),
                        Err(_) => None,
                    };
                    append(key, resolved.as_deref());
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    // Each cut must be a whole element as the page spells it (a reader
    // that skipped something unseen, as a byte-order mark, would be off).
    if cuts.is_empty()
        || cuts
            .iter()
            .any(|(range, _)| page.get(range.start) != Some(&b'<') || page[range.end - 1] != b'>')
    {
        return None;
    }
    let mut kept = Vec::with_capacity(page.len());
    let mut from = 0;
    let mut dropped = Vec::with_capacity(cuts.len());
    for (range, key) in cuts {
        kept.extend_from_slice(&page[from..range.start]);
        from = range.end;
        dropped.push(key);
    }
    kept.extend_from_slice(&page[from..]);
    Some((kept, dropped))
}

/// Adds a piece of a key; a piece that could not be read spoils the key.
fn append(key: &mut Option<String>, piece: Option<&str>) {
    match (key.as_mut(), piece) {
        (Some(key), Some(piece)) => key.push_str(piece),
        _ => *key = None,
    }
}

/// The longest name a component may have: the longest a local file's
/// can (`NAME_MAX`), which is what a program reading a mount expects.
const NAME_MAX: usize = 255;

/// Whether `key` is read back as itself: a path by `object_store`'s rules
/// (one trailing `/` allowed, as a folder marker or a common prefix has
/// it), without a leading `/`, without the two line ends an XML 1.1 page
/// would turn into `\n`, and with no component longer than [`NAME_MAX`]
/// bytes.
fn is_path(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('/')
        && !key.contains(['\u{85}', '\u{2028}'])
        && key.split('/').all(|component| component.len() <= NAME_MAX)
        && object_store::path::Path::parse(key).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(contents: &[&str], prefixes: &[&str]) -> String {
        let mut xml = String::from(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>b</Name>\
             <Prefix>wh/</Prefix><KeyCount>2</KeyCount>",
        );
        for key in contents {
            xml.push_str(&format!(
                "<Contents><Key>{key}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>\
                 <ETag>&quot;e&quot;</ETag><Size>1</Size></Contents>"
            ));
        }
        for prefix in prefixes {
            xml.push_str(&format!(
                "<CommonPrefixes><Prefix>{prefix}</Prefix></CommonPrefixes>"
            ));
        }
        xml.push_str("<IsTruncated>false</IsTruncated></ListBucketResult>");
        xml
    }

    #[test]
    fn a_page_of_paths_is_left_alone() {
        let xml = page(
            &["wh/a.jsonl", "wh/&amp; b", "wh/", "wh/CURRENT ", " wh/x"],
            &["wh/c/", "wh/d e/"],
        );
        assert_eq!(drop_unusable_keys(xml.as_bytes()), None);
    }

    #[test]
    fn keys_that_are_not_paths_are_cut_out_and_the_rest_kept_as_sent() {
        let longest = format!("wh/{}", "n".repeat(NAME_MAX));
        let long = format!("wh/{}/x", "n".repeat(NAME_MAX + 1));
        let bad = [
            "wh/a//b",
            "wh/..",
            "wh/./x",
            "wh/x&#1;y",
            "wh/tab\tx",
            "wh/nel\u{85}x",
            "/wh/x",
            "",
            long.as_str(),
        ];
        let mut contents = vec!["wh/good.jsonl", longest.as_str()];
        contents.extend(bad);
        let xml = page(&contents, &["wh/ok/", "wh/..//", "wh/&#x7f;/"]);
        let (kept, dropped) = drop_unusable_keys(xml.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(kept).unwrap(),
            page(&["wh/good.jsonl", longest.as_str()], &["wh/ok/"])
        );
        assert_eq!(dropped.len(), bad.len() + 2, "{dropped:?}");
        assert!(dropped.contains(&"wh/x\u{1}y".to_string()), "{dropped:?}");
    }

    #[test]
    fn the_object_stores_xml_reader_keeps_the_spaces_around_a_key() {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Contents {
            key: String,
        }
        let c: Contents =
            quick_xml::de::from_str("<Contents><Key> wh/CURRENT </Key></Contents>").unwrap();
        assert_eq!(c.key, " wh/CURRENT ");
    }

    #[test]
    fn what_is_not_a_listing_is_left_to_the_object_store() {
        let bom = format!("\u{feff}{}", page(&["wh/a//b"], &[]));
        assert_eq!(drop_unusable_keys(bom.as_bytes()), None);
        assert_eq!(drop_unusable_keys(b"<Error><Code>x</Code></Error>"), None);
        assert_eq!(drop_unusable_keys(b"<a><b></a>"), None);
        assert_eq!(drop_unusable_keys(b"\xff\xfe<<<"), None);
    }
}
