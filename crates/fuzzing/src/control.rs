//! crates/frontend: the control port (control-spec) as a controller's
//! bytes reach it: framing (line and data limits), then every command
//! through the session state machine against a backend that answers
//! everything, authenticated by cookie or not at all.

use rand::SeedableRng;

use onionmix_frontend::control::events::EventMask;
use onionmix_frontend::control::{
    AddOnion, AddedOnion, AuthAdded, AuthConfig, Backend, ClientAuthCred, CmdError, ConfError,
    Framer, HsFetch, HsPost, Info, Session, Signal, frame_error_reply,
};

use crate::input::chunks;

/// A backend that knows a few options and circuits and says yes to
/// what is well-formed, so the session's success paths are reached too.
#[derive(Default)]
struct Fuzzy {
    commands: usize,
}

impl Backend for Fuzzy {
    fn version(&self) -> String {
        "0.4.9.11 (onionmix-fuzz)".into()
    }
    fn getinfo(&mut self, key: &str) -> Info {
        match key {
            "version" => Info::Value(self.version()),
            "circuit-status" => Info::Value("1 BUILT $AA~a PURPOSE=GENERAL".into()),
            "address" => Info::Fail("Address unknown".into()),
            _ => Info::Unknown,
        }
    }
    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        key.eq_ignore_ascii_case("DisableNetwork")
            .then(|| vec![("DisableNetwork".into(), Some("0".into()))])
    }
    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        _reset: bool,
    ) -> Result<(), ConfError> {
        match changes.iter().find(|(k, _)| k != "DisableNetwork") {
            Some((k, _)) => Err(ConfError::Unknown(k.clone())),
            None => Ok(()),
        }
    }
    fn signal(&mut self, _sig: Signal) {
        self.commands += 1;
    }
    fn set_events(&mut self, _mask: EventMask) {}
    fn extend_circuit(
        &mut self,
        id: &str,
        _path: Option<Vec<String>>,
        _purpose: Option<&str>,
    ) -> Result<u64, CmdError> {
        match id {
            "0" | "7" => Ok(7),
            _ => Err(CmdError::new(552, format!("Unknown circuit \"{id}\""))),
        }
    }
    fn circuit_exists(&mut self, id: &str) -> bool {
        id == "7"
    }
    fn set_circuit_purpose(&mut self, _id: &str, _purpose: &str) -> Result<(), CmdError> {
        Ok(())
    }
    fn attach_stream(&mut self, _s: &str, _c: &str, _hop: Option<u32>) -> Result<(), CmdError> {
        Ok(())
    }
    fn close_stream(&mut self, _s: &str, _reason: u8) -> Result<(), CmdError> {
        Ok(())
    }
    fn close_circuit(&mut self, _c: &str, _if_unused: bool) -> Result<(), CmdError> {
        Ok(())
    }
    fn set_owner(&mut self, _owning: bool) {}
    fn add_onion(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        let _ = req;
        Ok(AddedOnion {
            service_id: "a".repeat(56),
            generated: None,
        })
    }
    fn del_onion(&mut self, _id: &str) -> Result<(), CmdError> {
        Ok(())
    }
    fn client_auth_add(&mut self, _cred: ClientAuthCred) -> Result<AuthAdded, CmdError> {
        Ok(AuthAdded::Added)
    }
    fn client_auth_remove(&mut self, _address: &str) -> Result<bool, CmdError> {
        Ok(true)
    }
    fn client_auth_view(&mut self) -> Vec<ClientAuthCred> {
        Vec::new()
    }
    fn hs_server_known(&mut self, _server: &str) -> bool {
        true
    }
    fn hs_fetch(&mut self, _req: &HsFetch) -> Result<(), CmdError> {
        Ok(())
    }
    fn hs_post(&mut self, _req: HsPost) -> Result<(), CmdError> {
        Ok(())
    }
}

/// Every reply is whole control-spec lines: `NNN` and ` `, `-` or `+`,
/// CRLF-terminated (a `+` data block ends with `.` on its own line).
fn check_reply(r: &[u8]) {
    assert!(r.is_empty() || r.ends_with(b"\r\n"), "unterminated reply");
    let text = String::from_utf8_lossy(r);
    let mut in_data = false;
    for line in text.split_terminator("\r\n") {
        if in_data {
            in_data = line != ".";
            continue;
        }
        let b = line.as_bytes();
        assert!(
            b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit),
            "bad reply line {line:?}"
        );
        assert!(matches!(b[3], b' ' | b'-' | b'+'), "bad separator {line:?}");
        in_data = b[3] == b'+';
    }
    assert!(!in_data, "data block without its end");
}

/// A controller's bytes (first byte: how to split them into reads, and
/// whether the connection authenticated with the cookie first), framed
/// and handled command by command.
pub fn control_port(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let cookie = [7u8; 32];
    let auth = AuthConfig {
        cookie: Some(cookie),
        cookie_path: Some("/nonexistent/control_auth_cookie".into()),
        passwords: Vec::new(),
    };
    let mut session = Session::new();
    let mut backend = Fuzzy::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(sel));
    let mut framer = Framer::new(4096, 64 * 1024);
    let mut input = Vec::new();
    if sel & 1 == 1 {
        input.extend_from_slice(format!("AUTHENTICATE {}\r\n", hex::encode(cookie)).as_bytes());
    }
    input.extend_from_slice(rest);
    // Reads of 1 to 128 bytes (odd splits), or the whole input at once.
    let pattern = [sel >> 1];
    let pieces = if sel >> 1 == 127 {
        chunks(input.len(), &[])
    } else {
        chunks(input.len(), &pattern)
    };
    for r in pieces {
        if let Err(e) = framer.push(&input[r]) {
            check_reply(&frame_error_reply(e));
            return;
        }
        loop {
            match framer.next_command() {
                Ok(Some(cmd)) => {
                    let o = session.handle(&cmd, &auth, &mut backend, &mut rng);
                    check_reply(&o.reply);
                    if o.close {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    check_reply(&frame_error_reply(e));
                    return;
                }
            }
            assert!(framer.buffered() <= 4096 + 64 * 1024 + input.len());
        }
    }
}
