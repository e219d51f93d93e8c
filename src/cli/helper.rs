//! The mount helper's call form: `SOURCE MOUNTPOINT [-o OPTIONS]`, as
//! `mount -t fuse.pchronicle` and `/etc/fstab` call it, turned into the
//! `pchronicle mount` command it stands for.
//!
//! Two ways lead here. `mount(8)` runs `/sbin/mount.fuse.pchronicle` (a
//! link to this binary) as `mount.fuse.pchronicle SOURCE MOUNTPOINT [-sfnv]
//! -o OPTIONS`; without that link, fuse3's `mount.fuse3` runs `pchronicle
//! SOURCE MOUNTPOINT -o OPTIONS` found on the shell's default path. The
//! first is recognised by the program's name, the second by a first
//! argument that names a path (it has a `/`), which no command does.
//!
//! Options: those of `pchronicle mount -o` pass through; the ones fstab and
//! mount add for their own bookkeeping (`defaults`, `auto`, `nofail`,
//! `_netdev`, `x-*`, ...) are dropped; `rw`, `dev` and `suid`, which mount
//! adds when nothing else is said, are dropped with a warning (the mount is
//! always read-only, without devices or set-id bits); `NAME=VALUE` and
//! `NAME` are the flags `--NAME VALUE` and `--NAME` of `pchronicle mount`
//! (underscores read as dashes). Anything else is refused, or dropped with
//! a warning under `-s` (sloppy).

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::{ArgAction, CommandFactory};

use super::Cli;
use super::out::note;
use crate::error::{Error, ErrorCode, Result};

/// What a helper call asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HelperCall {
    /// Mount: the arguments of the equivalent `pchronicle mount`.
    Mount(Vec<OsString>),
    /// `-f`: do everything but mount (mount's fake mode).
    Fake(Vec<OsString>),
}

/// Options of `pchronicle mount -o`, passed on as they are.
const FUSE_OPTIONS: &[&str] = &[
    "ro",
    "allow_other",
    "allow_root",
    "default_permissions",
    "nodev",
    "nosuid",
    "noexec",
    "exec",
    "noatime",
    "atime",
];

/// Options that mount, fstab and systemd keep for themselves.
const BOOKKEEPING: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "_netdev",
    "nofail",
    "async",
    "sync",
    "relatime",
    "strictatime",
    "nodiratime",
    "lazytime",
    "nosymfollow",
];

/// Prefixes of options kept by mount, fstab, systemd and SELinux.
const BOOKKEEPING_PREFIXES: &[&str] = &[
    "x-",
    "X-",
    "comment=",
    "context=",
    "fscontext=",
    "defcontext=",
    "rootcontext=",
];

/// Flags of `pchronicle mount` an option may not name: `foreground` would
/// hold mount(8) (and a boot) until the mount ends, and the helper sets
/// `quiet` itself.
const NOT_AS_OPTIONS: &[&str] = &["foreground", "quiet"];

/// Options mount adds when none are given, which this mount cannot honour.
const NEVER_HONOURED: &[(&str, &str)] = &[
    ("rw", "the mount is always read-only"),
    ("dev", "device files are never shown"),
    ("suid", "set-id bits are never honoured"),
];

/// Whether `args` (the whole command line, program name first) are a mount
/// helper's call; then what it asks for.
pub(super) fn helper_call(args: &[OsString]) -> Option<Result<HelperCall>> {
    let program = args.first()?;
    let called_as_helper = Path::new(program)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| name.starts_with("mount."));
    let first = args.get(1)?;
    let names_a_path =
        !first.as_encoded_bytes().starts_with(b"-") && first.as_encoded_bytes().contains(&b'/');
    (called_as_helper || names_a_path).then(|| parse(&args[1..]))
}

fn usage(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::MountHelperUsage, message)
}

/// Parses `SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS] [-t TYPE]`.
fn parse(args: &[OsString]) -> Result<HelperCall> {
    let mut places = Vec::new();
    let mut options = Vec::new();
    let (mut sloppy, mut fake, mut verbose) = (false, false, false);
    let mut rest = args.iter();
    let mut flags_end = false;
    while let Some(arg) = rest.next() {
        let bytes = arg.as_encoded_bytes();
        if flags_end || !bytes.starts_with(b"-") || bytes == b"-" {
            places.push(arg.clone());
            continue;
        }
        let text = arg
            .to_str()
            .ok_or_else(|| usage(format!("{arg:?}: not UTF-8")))?;
        match text {
            "--" => flags_end = true,
            "-N" | "--namespace" => {
                return Err(usage("-N: mounting in another namespace is not supported"));
            }
            long if long.starts_with("--") => {
                return Err(usage(format!("{long}: unknown flag")));
            }
            short => {
                // Grouped like `-svo OPTIONS` or `-ofoo`: `o` and `t` take
                // the rest of the group, else the next argument.
                for (at, flag) in short.char_indices().skip(1) {
                    match flag {
                        's' => sloppy = true,
                        'f' => fake = true,
                        'v' => verbose = true,
                        'n' => {}
                        'o' | 't' => {
                            let attached = &short[at + 1..];
                            let value = if attached.is_empty() {
                                rest.next()
                                    .and_then(|v| v.to_str())
                                    .ok_or_else(|| usage(format!("-{flag} needs a UTF-8 value")))?
                            } else {
                                attached
                            };
                            if flag == 'o' {
                                options.extend(split_options(value));
                            } else if !matches!(value, "fuse.pchronicle" | "pchronicle") {
                                return Err(usage(format!(
                                    "-t {value}: this helper mounts fuse.pchronicle"
                                )));
                            }
                            break;
                        }
                        other => return Err(usage(format!("-{other}: unknown flag"))),
                    }
                }
            }
        }
    }
    let [source, mountpoint] = <[OsString; 2]>::try_from(places).map_err(|places| {
        usage(format!(
            "expected SOURCE MOUNTPOINT, got {} place(s): {places:?}",
            places.len()
        ))
    })?;
    let mut mount: Vec<OsString> = vec!["pchronicle".into(), "mount".into()];
    if !verbose {
        mount.push("--quiet".into());
    }
    let mut fuse = Vec::new();
    for option in options.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        match translate(option) {
            Ok(Translated::Fuse) => fuse.push(option),
            Ok(Translated::Dropped) => {}
            Ok(Translated::Warned(why)) => note!("pchronicle: ignoring -o {option}: {why}"),
            Ok(Translated::Flag(flag)) => {
                // A flag given twice (fstab options, then `-o` on the
                // command line): the last one holds, as mount does.
                let name = flag.split('=').next().unwrap_or_default().to_string();
                mount.retain(|given| {
                    given.to_str().and_then(|g| g.split('=').next()) != Some(name.as_str())
                });
                mount.push(flag.into());
            }
            Err(e) if sloppy => {
                note!("pchronicle: ignoring -o {option} (sloppy): {}", e.message)
            }
            Err(e) => return Err(e),
        }
    }
    if !fuse.is_empty() {
        mount.push(format!("-o{}", fuse.join(",")).into());
    }
    mount.extend(["--".into(), source, mountpoint]);
    if verbose {
        note!("pchronicle: running {mount:?}");
    }
    Ok(if fake {
        HelperCall::Fake(mount)
    } else {
        HelperCall::Mount(mount)
    })
}

/// The options of one `-o` value: split at commas, where `\,` is a comma
/// inside an option (a path holding one) and `\\` a backslash.
fn split_options(value: &str) -> Vec<String> {
    let mut options = vec![String::new()];
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ (',' | '\\')) => options.last_mut().unwrap().push(escaped),
                Some(other) => options.last_mut().unwrap().extend(['\\', other]),
                None => options.last_mut().unwrap().push('\\'),
            },
            ',' => options.push(String::new()),
            c => options.last_mut().unwrap().push(c),
        }
    }
    options
}

enum Translated {
    /// One of `pchronicle mount -o`'s options.
    Fuse,
    /// Bookkeeping of mount or fstab.
    Dropped,
    /// Dropped, with this reason said.
    Warned(&'static str),
    /// A flag of `pchronicle mount`.
    Flag(String),
}

/// What one `-o` option becomes.
fn translate(option: &str) -> Result<Translated> {
    if FUSE_OPTIONS.contains(&option) {
        return Ok(Translated::Fuse);
    }
    if BOOKKEEPING.contains(&option)
        || BOOKKEEPING_PREFIXES
            .iter()
            .any(|prefix| option.starts_with(prefix))
    {
        return Ok(Translated::Dropped);
    }
    if let Some((_, why)) = NEVER_HONOURED.iter().find(|(name, _)| *name == option) {
        return Ok(Translated::Warned(why));
    }
    let (name, value) = match option.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (option, None),
    };
    let long = name.replace('_', "-");
    let invalid =
        |why: String| Error::new(ErrorCode::MountOptionInvalid, format!("-o {option}: {why}"));
    if NOT_AS_OPTIONS.contains(&long.as_str()) {
        return Err(invalid(
            "not as a mount option (mount(8) waits for the helper)".into(),
        ));
    }
    let command = Cli::command();
    let flag = command
        .find_subcommand("mount")
        .expect("mount is a command")
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long.as_str()) && !arg.is_hide_set())
        .ok_or_else(|| invalid("unknown (see `pchronicle mount --help`)".into()))?;
    let takes_value = matches!(flag.get_action(), ArgAction::Set | ArgAction::Append);
    match (takes_value, value) {
        (true, Some(value)) => Ok(Translated::Flag(format!("--{long}={value}"))),
        (false, None) => Ok(Translated::Flag(format!("--{long}"))),
        (true, None) => Err(invalid(format!("needs a value: {name}=VALUE"))),
        (false, Some(_)) => Err(invalid(format!("takes no value: {name}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(args: &[&str]) -> Option<Result<HelperCall>> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        helper_call(&args)
    }

    fn mount(args: &[&str]) -> Vec<String> {
        match call(args) {
            Some(Ok(HelperCall::Mount(args))) => {
                args.into_iter().map(|a| a.into_string().unwrap()).collect()
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn refused(args: &[&str]) -> Error {
        match call(args) {
            Some(Err(e)) => e,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn grouped_flags_a_double_dash_and_escaped_commas_are_read() {
        assert_eq!(
            mount(&[
                "mount.pchronicle",
                "-svoallow_other,log=/var/log/a\\,b.log",
                "--",
                "/wh",
                "-mnt"
            ]),
            [
                "pchronicle",
                "mount",
                "--log=/var/log/a,b.log",
                "-oallow_other",
                "--",
                "/wh",
                "-mnt"
            ]
        );
        assert_eq!(
            mount(&["mount.pchronicle", "/wh", "/mnt", "-so", "noatime"]),
            [
                "pchronicle",
                "mount",
                "--quiet",
                "-onoatime",
                "--",
                "/wh",
                "/mnt"
            ]
        );
        assert_eq!(split_options("a\\\\,b\\x"), ["a\\", "b\\x"]);
        assert_eq!(
            refused(&["mount.pchronicle", "/wh", "/mnt", "-vq"]).code,
            ErrorCode::MountHelperUsage
        );
        assert_eq!(
            refused(&["mount.pchronicle", "/wh", "/mnt", "-o"]).code,
            ErrorCode::MountHelperUsage
        );
    }

    #[test]
    fn commands_are_not_helper_calls() {
        assert!(call(&["pchronicle", "mount", "/wh", "/mnt"]).is_none());
        assert!(call(&["pchronicle", "--help"]).is_none());
        assert!(call(&["pchronicle"]).is_none());
        assert!(call(&["/usr/bin/pchronicle", "ls", "./wh"]).is_none());
    }

    #[test]
    fn what_mount_passes_becomes_a_quiet_read_only_mount() {
        // mount(8) through /sbin/mount.fuse.pchronicle, no options given.
        assert_eq!(
            mount(&["/sbin/mount.fuse.pchronicle", "/wh", "/mnt", "-o", "rw"]),
            ["pchronicle", "mount", "--quiet", "--", "/wh", "/mnt"]
        );
        // fuse3's mount.fuse3, from an fstab line.
        assert_eq!(
            mount(&[
                "pchronicle",
                "/wh",
                "/mnt",
                "-o",
                "rw,dev,suid,nofail,_netdev,x-systemd.automount,relatime,context=x,allow_other,noatime,attr_ttl=5s,no_passthrough"
            ]),
            [
                "pchronicle",
                "mount",
                "--quiet",
                "--attr-ttl=5s",
                "--no-passthrough",
                "-oallow_other,noatime",
                "--",
                "/wh",
                "/mnt"
            ]
        );
    }

    #[test]
    fn helper_flags_are_understood() {
        let args = mount(&[
            "mount.pchronicle",
            "wh",
            "mnt",
            "-nv",
            "-t",
            "fuse.pchronicle",
        ]);
        assert_eq!(args, ["pchronicle", "mount", "--", "wh", "mnt"]);
        assert!(matches!(
            call(&["mount.pchronicle", "/wh", "/mnt", "-f"]),
            Some(Ok(HelperCall::Fake(_)))
        ));
        let twice = mount(&[
            "mount.pchronicle",
            "/wh",
            "/mnt",
            "-o",
            "attr_ttl=1s,no_repair",
            "-o",
            "attr_ttl=2s,no_repair",
        ]);
        assert_eq!(
            twice,
            [
                "pchronicle",
                "mount",
                "--quiet",
                "--attr-ttl=2s",
                "--no-repair",
                "--",
                "/wh",
                "/mnt"
            ]
        );
        let sloppy = mount(&[
            "mount.pchronicle",
            "/wh",
            "/mnt",
            "-s",
            "-o",
            "frobnicate,ro",
        ]);
        assert_eq!(
            sloppy,
            [
                "pchronicle",
                "mount",
                "--quiet",
                "-oro",
                "--",
                "/wh",
                "/mnt"
            ]
        );
    }

    #[test]
    fn what_cannot_be_used_is_refused_with_a_code() {
        for (args, code) in [
            (
                &["mount.pchronicle", "/wh"][..],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "/x"],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-N", "1"],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-t", "ext4"],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o"],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-x"],
                ErrorCode::MountHelperUsage,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "frobnicate"],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "attr_ttl"],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "allow_other=1"],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &[
                    "mount.pchronicle",
                    "/wh",
                    "/mnt",
                    "-o",
                    "no_passthrough=yes",
                ],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "quiet=1"],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "foreground"],
                ErrorCode::MountOptionInvalid,
            ),
            (
                &["mount.pchronicle", "/wh", "/mnt", "-o", "quiet"],
                ErrorCode::MountOptionInvalid,
            ),
        ] {
            assert_eq!(refused(args).code, code, "{args:?}");
        }
    }
}
