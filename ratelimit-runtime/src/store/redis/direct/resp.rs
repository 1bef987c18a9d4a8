//! The RESP2 replies of a lone call's connection, read from its buffer.

use redis::{ErrorKind, RedisError, Value};

/// The deepest reply read: the decision scripts answer a string, or an array of integers or of
/// strings, so a deeper nesting is a server (or something posing as one) talking nonsense.
const DEPTH: usize = 4;

/// The RESP2 reply starting at `at` in `input`, and where it ends; `None` while it is
/// incomplete. Written here, for the replies of the decision scripts: the client's own parser
/// of a whole buffer zeroes a large one first, which cost more than the rest of a call's work on
/// this side (about 6 600 instructions of memset per reply). An error reply is read by that
/// parser, which knows its codes (`NOSCRIPT` among them).
pub(super) fn parse(input: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, RedisError> {
    let Some(&kind) = input.get(at) else { return Ok(None) };
    let Some(eol) = input[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let (line, line_end) = (&input[at + 1..at + eol], at + eol + 2);
    let number = || {
        std::str::from_utf8(line)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| RedisError::from((ErrorKind::Parse, "a number that is not one")))
    };
    let value = match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
        b'-' => redis::parse_redis_value(&input[at..line_end])?,
        b':' => Value::Int(number()?),
        b'$' => match usize::try_from(number()?) {
            // -1: nil.
            Err(_) => Value::Nil,
            Ok(n) => {
                let end = line_end.saturating_add(n);
                if input.len() < end.saturating_add(2) {
                    return Ok(None);
                }
                return Ok(Some((Value::BulkString(input[line_end..end].to_vec()), end + 2)));
            }
        },
        b'*' if depth < DEPTH => match usize::try_from(number()?) {
            Err(_) => Value::Nil,
            Ok(n) => {
                let (mut items, mut end) = (Vec::with_capacity(n.min(64)), line_end);
                for _ in 0..n {
                    match parse(input, end, depth + 1)? {
                        Some((item, next)) => {
                            items.push(item);
                            end = next;
                        }
                        None => return Ok(None),
                    }
                }
                return Ok(Some((Value::Array(items), end)));
            }
        },
        _ => return Err(RedisError::from((ErrorKind::Parse, "an unexpected reply"))),
    };
    Ok(Some((value, line_end)))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use redis::Value;

    fn read(b: &[u8]) -> Option<(Value, usize)> {
        parse(b, 0, 0).ok().flatten()
    }

    #[test]
    fn replies_are_read_whole_or_not_at_all() {
        assert_eq!(read(b"+OK\r\n"), Some((Value::Okay, 5)));
        assert_eq!(read(b"+PONG\r\n"), Some((Value::SimpleString("PONG".into()), 7)));
        assert_eq!(read(b"+OK\r"), None);
        assert_eq!(read(b":12\r\n:3"), Some((Value::Int(12), 5)));
        assert_eq!(read(b"$3\r\nabc\r\n"), Some((Value::BulkString(b"abc".to_vec()), 9)));
        assert_eq!(read(b"$3\r\nab"), None);
        assert_eq!(read(b"$3\r\nabc\r"), None);
        assert_eq!(read(b"$-1\r\n"), Some((Value::Nil, 5)));
        assert_eq!(
            read(b"*2\r\n:1\r\n$1\r\nx\r\n"),
            Some((Value::Array(vec![Value::Int(1), Value::BulkString(b"x".to_vec())]), 15))
        );
        assert_eq!(read(b"*2\r\n:1\r\n$1\r\n"), None);
        let (error, end) = read(b"-NOSCRIPT No matching script\r\n").unwrap();
        assert_eq!(end, 30);
        let error = error.extract_error().unwrap_err();
        assert_eq!(error.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        assert!(parse(b"?x\r\n", 0, 0).is_err());
        assert!(parse(b"$x\r\n", 0, 0).is_err());
        assert!(parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 0, 0).is_err(), "nested past the depth");
        // A huge length is incomplete, never an overflow.
        assert_eq!(read(b"$9223372036854775807\r\n"), None);
    }
}
