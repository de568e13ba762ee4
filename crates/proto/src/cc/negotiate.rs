//! Negotiating congestion control in the ntor-v3 handshake (proposal 324
//! §10): the client's request extension, the exit's response carrying
//! `sendme_inc`, and the checks both ends make. Works on extension lists
//! (type, data) as `onionmix-crypto`'s ntor-v3 codec produces them.

/// Extension type of the client's request (empty body).
pub const EXT_CC_REQUEST: u8 = 1;
/// Extension type of the exit's response (one byte: `sendme_inc`).
pub const EXT_CC_RESPONSE: u8 = 2;

/// Why a handshake's congestion-control extensions were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NegotiateError {
    /// A response came although we did not ask (§10.5: MUST reject).
    #[error("congestion control response without a request")]
    Unrequested,
    /// The response body is not one byte.
    #[error("malformed congestion control response")]
    Malformed,
    /// `sendme_inc` is 0 or not within a factor of two of ours.
    #[error("sendme_inc {0} out of range")]
    SendmeInc(u8),
}

/// The client's extension list: a request when `want` is set, else none.
pub fn client_extensions(want: bool) -> Vec<(u8, Vec<u8>)> {
    if want {
        vec![(EXT_CC_REQUEST, Vec::new())]
    } else {
        Vec::new()
    }
}

/// Exit side: whether the client asked for congestion control (unknown
/// extensions are ignored).
pub fn client_requested<'a>(exts: impl IntoIterator<Item = (u8, &'a [u8])>) -> bool {
    exts.into_iter().any(|(t, _)| t == EXT_CC_REQUEST)
}

/// Exit side: the response extensions. With `sendme_inc` (congestion
/// control on), one response field; otherwise none.
pub fn exit_extensions(sendme_inc: Option<u8>) -> Vec<(u8, Vec<u8>)> {
    match sendme_inc {
        Some(inc) => vec![(EXT_CC_RESPONSE, vec![inc])],
        None => Vec::new(),
    }
}

/// Client side: read the exit's answer. `requested` is whether we asked;
/// `acceptable` judges `sendme_inc` (see
/// [`super::CcParams::sendme_inc_acceptable`]). Only the first response
/// field counts; unknown fields are ignored. `Ok(None)`: the exit declined
/// (fixed windows); `Ok(Some(inc))`: congestion control with that
/// increment. An error means: close the circuit.
pub fn client_check_response<'a>(
    requested: bool,
    exts: impl IntoIterator<Item = (u8, &'a [u8])>,
    acceptable: impl Fn(u8) -> bool,
) -> Result<Option<u8>, NegotiateError> {
    let Some((_, body)) = exts.into_iter().find(|(t, _)| *t == EXT_CC_RESPONSE) else {
        return Ok(None);
    };
    if !requested {
        return Err(NegotiateError::Unrequested);
    }
    let [inc] = body else {
        return Err(NegotiateError::Malformed);
    };
    if !acceptable(*inc) {
        return Err(NegotiateError::SendmeInc(*inc));
    }
    Ok(Some(*inc))
}

#[cfg(test)]
mod tests {
    use super::super::CcParams;
    use super::*;

    fn view(v: &[(u8, Vec<u8>)]) -> Vec<(u8, &[u8])> {
        v.iter().map(|(t, d)| (*t, d.as_slice())).collect()
    }

    #[test]
    fn request_and_response() {
        let p = CcParams::default();
        let ok = |i| p.sendme_inc_acceptable(i);
        let req = client_extensions(true);
        assert_eq!(req, vec![(1, vec![])]);
        assert!(client_requested(view(&req)));
        assert!(!client_requested(view(&client_extensions(false))));
        // Unknown extensions around the request are ignored.
        assert!(client_requested(view(&[(9, vec![1, 2]), (1, vec![])])));
        let resp = exit_extensions(Some(31));
        assert_eq!(client_check_response(true, view(&resp), ok), Ok(Some(31)));
        assert_eq!(
            client_check_response(true, view(&exit_extensions(None)), ok),
            Ok(None)
        );
        // Only the first response counts.
        let two = [(7, vec![]), (2, vec![20]), (2, vec![200])];
        assert_eq!(client_check_response(true, view(&two), ok), Ok(Some(20)));
    }

    #[test]
    fn bad_responses_are_refused() {
        let p = CcParams::default();
        let ok = |i| p.sendme_inc_acceptable(i);
        assert_eq!(
            client_check_response(false, view(&exit_extensions(Some(31))), ok),
            Err(NegotiateError::Unrequested)
        );
        assert_eq!(
            client_check_response(true, view(&[(2, vec![])]), ok),
            Err(NegotiateError::Malformed)
        );
        assert_eq!(
            client_check_response(true, view(&[(2, vec![31, 0])]), ok),
            Err(NegotiateError::Malformed)
        );
        for bad in [0u8, 14, 63, 255] {
            assert_eq!(
                client_check_response(true, view(&exit_extensions(Some(bad))), ok),
                Err(NegotiateError::SendmeInc(bad))
            );
        }
    }
}
