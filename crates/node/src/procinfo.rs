//! Facts about this process that controllers ask for (`GETINFO
//! process/uid`, `process/user`, `process/descriptor-limit`), with tor's
//! answers where a fact is not to be had (-1, an empty name).

/// The real user ID (-1 where there is none).
#[allow(unsafe_code)]
pub fn uid() -> i64 {
    #[cfg(unix)]
    {
        // SAFETY: getuid takes no arguments and cannot fail.
        i64::from(unsafe { libc::getuid() })
    }
    #[cfg(not(unix))]
    {
        -1
    }
}

/// The name of the real user ("" when the user database has none).
#[allow(unsafe_code)]
pub fn user_name() -> String {
    #[cfg(unix)]
    {
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        // SAFETY: passwd is a plain C struct; all-zero is a valid value
        // for it (null pointers, zero ids), and getpwuid_r overwrites it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to a live local of the stated size;
        // getpwuid_r writes only into `pwd` and `buf` (at most buf.len()
        // bytes) and sets `found` to &pwd or null.
        let rc = unsafe {
            libc::getpwuid_r(
                libc::getuid(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return String::new();
        }
        // SAFETY: on success pw_name points to a NUL-terminated string
        // inside `buf`, which is still alive.
        unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned()
    }
    #[cfg(not(unix))]
    {
        String::new()
    }
}

/// How many file descriptors this process may have open (the soft
/// limit; -1 if unknown).
#[allow(unsafe_code)]
pub fn descriptor_limit() -> i64 {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct we pass.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            return i64::try_from(lim.rlim_cur).unwrap_or(i64::MAX);
        }
        -1
    }
    #[cfg(not(unix))]
    {
        -1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_this_process_s() {
        assert!(uid() >= 0);
        assert!(descriptor_limit() > 0);
        // The name, when there is one, belongs to our uid.
        let name = user_name();
        if uid() == 0 {
            assert_eq!(name, "root");
        }
    }
}
