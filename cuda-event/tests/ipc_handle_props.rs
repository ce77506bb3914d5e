//! Property tests of `IpcEventHandle`'s forms: bytes and hex text round-trip, and every malformed
//! input is a typed error (never a panic), for any input proptest can think of.

use cuda_event::{IpcEventHandle, IpcHandleParseError};
use proptest::prelude::*;

const LEN: usize = IpcEventHandle::LEN;

fn any_handle() -> impl Strategy<Value = IpcEventHandle> {
    proptest::array::uniform32(any::<u8>()).prop_flat_map(|a| {
        proptest::array::uniform32(any::<u8>())
            .prop_map(move |b| IpcEventHandle::from_bytes(&[a, b].concat()).unwrap())
    })
}

/// ASCII whitespace as `str::trim_ascii` knows it.
fn ascii_space() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop::sample::select(vec![' ', '\t', '\n', '\r', '\x0c']), 0..4)
        .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #[test]
    fn bytes_round_trip(handle in any_handle()) {
        prop_assert_eq!(IpcEventHandle::from_bytes(handle.as_bytes()), Ok(handle));
    }

    #[test]
    fn text_round_trips_in_either_case_with_whitespace_around(
        handle in any_handle(), before in ascii_space(), after in ascii_space(), upper: bool,
    ) {
        let text = handle.to_string();
        prop_assert_eq!(text.len(), 2 * LEN);
        prop_assert!(text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        let text = if upper { text.to_uppercase() } else { text };
        prop_assert_eq!(format!("{before}{text}{after}").parse::<IpcEventHandle>(), Ok(handle));
    }

    #[test]
    fn bytes_of_any_other_length_are_rejected(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        prop_assume!(bytes.len() != LEN);
        prop_assert_eq!(
            IpcEventHandle::from_bytes(&bytes),
            Err(IpcHandleParseError::Length { expected: LEN, found: bytes.len() })
        );
    }

    #[test]
    fn any_text_parses_or_is_a_typed_error(text in ".{0,300}") {
        match text.parse::<IpcEventHandle>() {
            Ok(handle) => prop_assert_eq!(handle.to_string(), text.trim_ascii().to_lowercase()),
            Err(IpcHandleParseError::Length { expected, found }) => {
                prop_assert_eq!(expected, 2 * LEN);
                prop_assert_eq!(found, text.trim_ascii().len());
                prop_assert_ne!(found, 2 * LEN);
            }
            Err(IpcHandleParseError::Text { position }) => {
                prop_assert!(!text.as_bytes()[position].is_ascii_hexdigit());
                let leading = text.len() - text.trim_ascii_start().len();
                prop_assert!(text.as_bytes()[leading..position].iter().all(u8::is_ascii_hexdigit));
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn one_bad_character_is_found_where_it_is(handle in any_handle(), at in 0..2 * LEN, bad in "[^0-9a-fA-F]") {
        let mut text = handle.to_string();
        let bad: char = bad.chars().next().unwrap();
        prop_assume!(bad.is_ascii() && !bad.is_ascii_whitespace());
        text.replace_range(at..at + 1, &bad.to_string());
        prop_assert_eq!(text.parse::<IpcEventHandle>(), Err(IpcHandleParseError::Text { position: at }));
    }
}
