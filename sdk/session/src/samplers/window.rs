//! The active window's bucket, from the X server (EWMH `_NET_ACTIVE_WINDOW`).

use x11rb::connection::Connection;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _, Window};
use x11rb::rust_connection::RustConnection;

/// The lab agent's window buckets (`WINDOW_BUCKETS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowBucket {
    /// The software under study (SLEAP by default).
    Subject,
    /// A terminal emulator.
    Terminal,
    /// A web browser.
    Browser,
    /// Anything else, no active window, or no display.
    Other,
}

impl WindowBucket {
    /// The bucket's name in samples and labels: `subject`, `terminal`, `browser`, `other`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WindowBucket::Subject => "subject",
            WindowBucket::Terminal => "terminal",
            WindowBucket::Browser => "browser",
            WindowBucket::Other => "other",
        }
    }

    /// The bucket named `name` (one of [`as_str`](Self::as_str)'s values).
    pub fn parse(name: &str) -> Option<Self> {
        [
            WindowBucket::Subject,
            WindowBucket::Terminal,
            WindowBucket::Browser,
            WindowBucket::Other,
        ]
        .into_iter()
        .find(|b| b.as_str() == name)
    }
}

/// Finds the active window's bucket.
pub trait WindowSampler: Send {
    /// The bucket of the window that has the focus now.
    fn bucket(&mut self) -> WindowBucket;
}

/// Which property of a window a [`WindowRule`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowField {
    /// Either string of `WM_CLASS` (instance or class, e.g. `gnome-terminal-server`,
    /// `Gnome-terminal`).
    Class,
    /// The title: `_NET_WM_NAME`, else `WM_NAME`.
    Title,
}

/// Puts windows whose [`WindowField`] contains `pattern` (ignoring ASCII case) in a
/// bucket. The first matching rule wins; no match is `other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRule {
    /// Where matching windows go.
    pub bucket: WindowBucket,
    /// What is matched.
    pub field: WindowField,
    /// The substring, lower case.
    pub pattern: String,
}

impl WindowRule {
    /// A rule; `pattern` is matched ignoring ASCII case.
    pub fn new(bucket: WindowBucket, field: WindowField, pattern: &str) -> Self {
        WindowRule {
            bucket,
            field,
            pattern: pattern.to_ascii_lowercase(),
        }
    }

    /// Parses `BUCKET=class:SUBSTRING` or `BUCKET=title:SUBSTRING` (the CLI's form).
    pub fn parse(text: &str) -> Option<Self> {
        let (bucket, rest) = text.split_once('=')?;
        let (field, pattern) = rest.split_once(':')?;
        let field = match field {
            "class" => WindowField::Class,
            "title" => WindowField::Title,
            _ => return None,
        };
        if pattern.is_empty() {
            return None;
        }
        Some(WindowRule::new(
            WindowBucket::parse(bucket)?,
            field,
            pattern,
        ))
    }

    fn matches(&self, class: &[String], title: &str) -> bool {
        match self.field {
            WindowField::Class => class.iter().any(|c| c.contains(&self.pattern)),
            WindowField::Title => title.contains(&self.pattern),
        }
    }
}

/// The default rules: SLEAP (by class or title) is the subject; common terminal
/// emulators and browsers by `WM_CLASS`.
pub const DEFAULT_WINDOW_RULES: &[(WindowBucket, WindowField, &str)] = &[
    (WindowBucket::Subject, WindowField::Class, "sleap"),
    (WindowBucket::Subject, WindowField::Title, "sleap"),
    (WindowBucket::Terminal, WindowField::Class, "terminal"),
    (WindowBucket::Terminal, WindowField::Class, "terminator"),
    (WindowBucket::Terminal, WindowField::Class, "konsole"),
    (WindowBucket::Terminal, WindowField::Class, "xterm"),
    (WindowBucket::Terminal, WindowField::Class, "rxvt"),
    (WindowBucket::Terminal, WindowField::Class, "alacritty"),
    (WindowBucket::Terminal, WindowField::Class, "kitty"),
    (WindowBucket::Terminal, WindowField::Class, "wezterm"),
    (WindowBucket::Terminal, WindowField::Class, "tilix"),
    (WindowBucket::Terminal, WindowField::Class, "foot"),
    (WindowBucket::Browser, WindowField::Class, "firefox"),
    (WindowBucket::Browser, WindowField::Class, "librewolf"),
    (WindowBucket::Browser, WindowField::Class, "chromium"),
    (WindowBucket::Browser, WindowField::Class, "chrome"),
    (WindowBucket::Browser, WindowField::Class, "brave"),
    (WindowBucket::Browser, WindowField::Class, "microsoft-edge"),
    (WindowBucket::Browser, WindowField::Class, "vivaldi"),
    (WindowBucket::Browser, WindowField::Class, "opera"),
    (WindowBucket::Browser, WindowField::Class, "epiphany"),
];

/// The default rules as [`WindowRule`]s.
pub fn default_window_rules() -> Vec<WindowRule> {
    DEFAULT_WINDOW_RULES
        .iter()
        .map(|(bucket, field, pattern)| WindowRule::new(*bucket, *field, pattern))
        .collect()
}

x11rb::atom_manager! {
    Atoms: AtomsCookie {
        _NET_ACTIVE_WINDOW,
        _NET_WM_NAME,
    }
}

struct Display {
    conn: RustConnection,
    root: Window,
    atoms: Atoms,
}

/// The most bytes of a window's class or title read.
const MAX_PROPERTY_WORDS: u32 = 256;

/// Reads the active window from an X server with `x11rb` (pure Rust, no Xlib).
///
/// At each tick: the root window's `_NET_ACTIVE_WINDOW` (set by EWMH window managers),
/// then that window's `WM_CLASS` and title, matched against the rules. No active
/// window, a window that is gone, and no display at all are `other`. Without a display
/// (`DISPLAY` unset, the server unreachable) it logs once and tries again at every
/// tick, so a session whose X server starts later is read from then on; a connection
/// that breaks is logged once and reopened likewise.
pub struct X11Window {
    display_name: Option<String>,
    rules: Vec<WindowRule>,
    display: Option<Display>,
    logged_no_display: bool,
}

impl std::fmt::Debug for X11Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X11Window")
            .field("display_name", &self.display_name)
            .field("rules", &self.rules.len())
            .field("connected", &self.display.is_some())
            .finish()
    }
}

impl Default for X11Window {
    fn default() -> Self {
        X11Window::new(default_window_rules())
    }
}

impl X11Window {
    /// A sampler of the display in `DISPLAY`, with `rules`.
    pub fn new(rules: Vec<WindowRule>) -> Self {
        X11Window {
            display_name: None,
            rules,
            display: None,
            logged_no_display: false,
        }
    }

    /// Reads this display (e.g. `:1`) instead of `DISPLAY`'s.
    pub fn with_display(mut self, name: impl Into<String>) -> Self {
        self.display_name = Some(name.into());
        self
    }

    /// The bucket of a window with this `WM_CLASS` and title, by the rules.
    pub fn classify(&self, class: &[String], title: &str) -> WindowBucket {
        self.rules
            .iter()
            .find(|r| r.matches(class, title))
            .map_or(WindowBucket::Other, |r| r.bucket)
    }

    fn connect(&mut self) -> Option<&Display> {
        if self.display.is_none() {
            match open(self.display_name.as_deref()) {
                Ok(display) => {
                    if self.logged_no_display {
                        tracing::info!("X display connected; reading the active window");
                    }
                    self.logged_no_display = false;
                    self.display = Some(display);
                }
                Err(e) => {
                    if !self.logged_no_display {
                        self.logged_no_display = true;
                        tracing::info!(
                            error = %e,
                            "no X display: the window bucket is `other` until one can be reached (logged once)"
                        );
                    }
                }
            }
        }
        self.display.as_ref()
    }

    /// `WM_CLASS` strings (lower case) and title (lower case) of the active window, or
    /// `None` when there is none; `Err` when the connection failed.
    fn active_window(display: &Display) -> Result<Option<(Vec<String>, String)>, Broken> {
        let conn = &display.conn;
        let active = conn
            .get_property(
                false,
                display.root,
                display.atoms._NET_ACTIVE_WINDOW,
                AtomEnum::ANY,
                0,
                1,
            )?
            .reply()?;
        let window = active.value32().and_then(|mut v| v.next()).unwrap_or(0);
        if window == 0 {
            return Ok(None);
        }
        let property = |atom: u32, type_: u32| -> Result<Option<Vec<u8>>, Broken> {
            match conn
                .get_property(false, window, atom, type_, 0, MAX_PROPERTY_WORDS)?
                .reply()
            {
                Ok(reply) if reply.format == 8 => Ok(Some(reply.value)),
                Ok(_) => Ok(None),
                // The window is gone (BadWindow): no active window.
                Err(x11rb::errors::ReplyError::X11Error(_)) => Ok(None),
                Err(x11rb::errors::ReplyError::ConnectionError(e)) => Err(Broken(e.to_string())),
            }
        };
        let Some(class) = property(AtomEnum::WM_CLASS.into(), AtomEnum::ANY.into())? else {
            // Neither class nor (then) a title can be read: treat as gone when the
            // title is missing too.
            let title = property(display.atoms._NET_WM_NAME, AtomEnum::ANY.into())?;
            return Ok(title.map(|t| (Vec::new(), lower(&t))));
        };
        let class: Vec<String> = class
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(lower)
            .collect();
        let title = match property(display.atoms._NET_WM_NAME, AtomEnum::ANY.into())? {
            Some(title) => title,
            None => property(AtomEnum::WM_NAME.into(), AtomEnum::ANY.into())?.unwrap_or_default(),
        };
        Ok(Some((class, lower(&title))))
    }
}

fn lower(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_ascii_lowercase()
}

/// The connection to the X server failed.
struct Broken(String);

impl From<x11rb::errors::ConnectionError> for Broken {
    fn from(e: x11rb::errors::ConnectionError) -> Self {
        Broken(e.to_string())
    }
}

impl From<x11rb::errors::ReplyError> for Broken {
    fn from(e: x11rb::errors::ReplyError) -> Self {
        Broken(e.to_string())
    }
}

fn open(name: Option<&str>) -> Result<Display, String> {
    let (conn, screen) = x11rb::connect(name).map_err(|e| e.to_string())?;
    let root = conn
        .setup()
        .roots
        .get(screen)
        .map(|s| s.root)
        .ok_or_else(|| format!("the X server has no screen {screen}"))?;
    let atoms = Atoms::new(&conn)
        .map_err(|e| e.to_string())?
        .reply()
        .map_err(|e| e.to_string())?;
    Ok(Display { conn, root, atoms })
}

impl WindowSampler for X11Window {
    fn bucket(&mut self) -> WindowBucket {
        let Some(display) = self.connect() else {
            return WindowBucket::Other;
        };
        match X11Window::active_window(display) {
            Ok(Some((class, title))) => self.classify(&class, &title),
            Ok(None) => WindowBucket::Other,
            Err(Broken(e)) => {
                tracing::warn!(error = %e, "the X connection broke; the window bucket is `other` until it is reopened");
                self.display = None;
                self.logged_no_display = true;
                WindowBucket::Other
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rules_bucket_common_windows() {
        let w = X11Window::default();
        let class = |c: &[&str]| c.iter().map(|s| s.to_ascii_lowercase()).collect::<Vec<_>>();
        assert_eq!(
            w.classify(&class(&["sleap-label", "sleap-label"]), ""),
            WindowBucket::Subject
        );
        assert_eq!(
            w.classify(&class(&["python3", "Python3"]), "sleap - labels.slp"),
            WindowBucket::Subject
        );
        assert_eq!(
            w.classify(&class(&["gnome-terminal-server", "Gnome-terminal"]), "bash"),
            WindowBucket::Terminal
        );
        assert_eq!(
            w.classify(&class(&["Navigator", "firefox"]), "docs"),
            WindowBucket::Browser
        );
        assert_eq!(
            w.classify(
                &class(&["libreoffice", "LibreOffice"]),
                "a terminal tutorial"
            ),
            WindowBucket::Other
        );
    }

    #[test]
    fn rules_parse_from_the_cli_form() {
        assert_eq!(
            WindowRule::parse("subject=class:Napari"),
            Some(WindowRule::new(
                WindowBucket::Subject,
                WindowField::Class,
                "napari"
            ))
        );
        assert_eq!(
            WindowRule::parse("browser=title:Jupyter"),
            Some(WindowRule::new(
                WindowBucket::Browser,
                WindowField::Title,
                "jupyter"
            ))
        );
        assert_eq!(WindowRule::parse("nowhere=class:x"), None);
        assert_eq!(WindowRule::parse("subject=name:x"), None);
        assert_eq!(WindowRule::parse("subject=class:"), None);
    }

    #[test]
    fn no_display_is_other() {
        // A display that cannot exist: a socket path that is not there.
        let mut w = X11Window::default().with_display("/nonexistent/higgsmeter-x11-socket:0");
        assert_eq!(w.bucket(), WindowBucket::Other);
        assert_eq!(w.bucket(), WindowBucket::Other);
        assert!(w.logged_no_display);
    }
}
