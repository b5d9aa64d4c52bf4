"""A flow's last printed line is on the Prefect API when `flush_logs` returns (Prefect sends logs
from a background worker and waits only 5 s at exit: a loaded machine lost a run's summary)."""
from __future__ import annotations

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.runtime import flow_run

from tasks.artifacts import flush_logs


def test_the_last_line_is_sent_before_the_flow_returns(prefect_api):
    @flow(log_prints=True)
    def talks() -> str:
        for i in range(150):  # a queue for the worker to send, the summary last
            print(f"line {i}")
        print("the run's summary")
        flush_logs()
        with get_client(sync_client=True) as client:  # read at once: no polling
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(
                any_=[flow_run.get_id()])), limit=200)
        return "\n".join(entry.message for entry in logs)

    sent = talks()
    assert "the run's summary" in sent and "line 149" in sent
    flush_logs()  # a second drain, with nothing queued, is harmless
