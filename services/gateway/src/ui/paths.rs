//! Every address of the dashboard, and its menu: the one list that the
//! router (`mod.rs`) binds to handlers and the frame (`page.rs`) shows.

/// Where the dashboard lives.
pub const PREFIX: &str = "/ui";
pub(crate) const TOP: &str = "/ui/top";
pub(crate) const GROUP: &str = "/ui/group";
pub(crate) const USAGE: &str = "/ui/usage";
pub(crate) const KEY: &str = "/ui/key";
pub(crate) const POLICIES: &str = "/ui/policies";
pub(crate) const STATUS: &str = "/ui/status";
pub(crate) const ALERTS: &str = "/ui/alerts";
pub(crate) const RESET: &str = "/ui/key/reset";
pub(crate) const LOGIN: &str = "/ui/login";
pub(crate) const LOGOUT: &str = "/ui/logout";
pub(crate) const STYLE: &str = "/ui/assets/style.css";

/// The pages of the menu, in its order: each a path and its title. A page
/// is added with its line here and its handler in `mod.rs`'s `page_route`.
pub(crate) const MENU: &[(&str, &str)] = &[
    (TOP, "Top keys"),
    (GROUP, "Group"),
    (USAGE, "Usage"),
    (KEY, "Key"),
    (POLICIES, "Policies"),
    (STATUS, "Status"),
    (ALERTS, "Alerts"),
];
