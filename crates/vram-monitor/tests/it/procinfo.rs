use vram_monitor::procinfo::{parse_cmdline, parse_passwd, parse_status_uid, ProcessNames};

#[test]
fn parsers_handle_real_and_broken_text() {
    let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\n# comment\nbroken\nalice:x:1000:1000::/home/alice:/bin/sh\n");
    assert_eq!(users.get(&0).map(String::as_str), Some("root"));
    assert_eq!(users.get(&1000).map(String::as_str), Some("alice"));
    assert_eq!(users.len(), 2);
    assert_eq!(
        parse_status_uid("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\n"),
        Some(1000)
    );
    assert_eq!(parse_status_uid("Name: x\n"), None);
    assert_eq!(
        parse_cmdline(b"python\0train.py\0--bs\08\0"),
        Some("python train.py --bs 8".into())
    );
    assert_eq!(parse_cmdline(b""), None);
}

#[test]
fn own_process_is_found_and_a_missing_one_is_unknown() {
    let mut names = ProcessNames::new();
    let (user, cmd) = names.lookup(std::process::id());
    assert_ne!(user, "?");
    assert!(cmd.contains("it"), "{cmd}");
    assert_eq!(names.lookup(u32::MAX), ("?".to_string(), "?".to_string()));
}
