//! The engine client's log stream (`engine`): a container's stdout and stderr from a time on,
//! followed until the container goes (or the engine ends the stream), handed over line by line.

use bollard::container::{LogOutput, LogsOptions};
use futures_util::StreamExt;

use crate::engine::{Engine, EngineError};

/// The longest line kept whole: a longer one is cut there (netproxy's lines are bounded well
/// below it), so a container that writes no newline cannot grow this process's memory.
const MAX_LINE: usize = 64 * 1024;

impl Engine {
    /// Follows container `id`'s log from `since` (UNIX seconds; 0: from its start), calling
    /// `line` with each complete line of its stdout or stderr, until the stream ends.
    pub async fn follow_log_lines(
        &self,
        id: &str,
        since: i64,
        mut line: impl FnMut(&[u8]),
    ) -> Result<(), EngineError> {
        let opts = LogsOptions::<String> {
            follow: true,
            stdout: true,
            stderr: true,
            since,
            ..Default::default()
        };
        let docker = self.client().await?;
        let mut stream = docker.logs(id, Some(opts));
        let mut pending = Vec::new();
        while let Some(item) = stream.next().await {
            let bytes = match item.map_err(|e| EngineError::from_bollard(e, self.address()))? {
                LogOutput::StdOut { message } | LogOutput::StdErr { message } => message,
                LogOutput::Console { message } => message,
                LogOutput::StdIn { .. } => continue,
            };
            pending.extend_from_slice(&bytes);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                line(&pending[..end]);
                pending.drain(..=end);
            }
            if pending.len() > MAX_LINE {
                line(&pending[..MAX_LINE]);
                pending.clear();
            }
        }
        if !pending.is_empty() {
            line(&pending);
        }
        Ok(())
    }
}
