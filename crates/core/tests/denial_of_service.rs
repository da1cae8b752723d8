#[path = "denial_of_service/stray_replies.rs"]
mod stray_replies;
mod support;
