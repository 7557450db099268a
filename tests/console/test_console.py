"""The web console in a real headless browser: each action made through the pages is checked afterwards
through the client (tidalmq.client.Admin), as another operator would see it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.console.data import XSS, Seeded
from tests.console.support import PAGE_WAIT_S, admin_call, run
from tests.support import Standalone, wait_for
from tidalmq.client.admin import Admin, AdminError
from tidalmq.remoting.codes import ResponseCode


def open_page(browser: Any, s: Standalone, path: str) -> None:
    browser.get(s.console_url + path)


def flash(browser: Any) -> str:
    """The notice (or error) a POST answered with."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    el = WebDriverWait(browser, PAGE_WAIT_S).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, "#notice, #error")))
    return f"{el.get_attribute('id')}: {el.text}"


def click_and_wait(browser: Any, button: Any) -> None:
    """Click, and wait for the next page to replace this one."""
    from selenium.webdriver.support.ui import WebDriverWait

    button.click()
    WebDriverWait(browser, PAGE_WAIT_S).until(lambda _: _replaced(button))


def _replaced(element: Any) -> bool:
    """Whether ``element`` no longer belongs to the page (EC.staleness_of, plus the inspector error
    chromium answers instead of a stale reference while the next page replaces the document)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e.msg):
            return True
        raise
    return False


def fill(browser: Any, form_id: str, **values: str) -> None:
    from selenium.webdriver.common.by import By

    form = browser.find_element(By.ID, form_id)
    for name, value in values.items():
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))


def row_with(browser: Any, table_cls: str, text: str, unit: str = "tr") -> Any:
    """The first row (``unit``) of the page's table.<table_cls> whose text holds ``text``."""
    from selenium.webdriver.common.by import By

    rows = [r for r in browser.find_elements(By.CSS_SELECTOR, f"table.{table_cls} {unit}") if text in r.text]
    assert rows, f"no row of table.{table_cls} shows {text!r}: {browser.page_source[:3000]}"
    return rows[0]


def message_with(browser: Any, text: str) -> Any:
    """A message on the page: its row and its properties and body below."""
    return row_with(browser, "messages", text, "tbody.message")


def test_create_and_delete_a_topic(browser: Any, shared_standalone: Standalone, seeded: Seeded) -> None:
    s = shared_standalone
    open_page(browser, s, "/topics")
    fill(browser, "create-topic", topic="ConsoleMade", queues="3")
    assert "topic ConsoleMade created" in flash(browser)
    route = run(admin_call(s, "route", "ConsoleMade"))
    assert [int(q["writeQueueNums"]) for q in route["queueDatas"]] == [3]
    row_with(browser, "topics", "ConsoleMade")
    # a name RocketMQ refuses: the broker's reason on the page, nothing created
    open_page(browser, s, "/topics")
    fill(browser, "create-topic", topic="bad topic!", queues="3")
    assert flash(browser).startswith("error: ") and "bad topic!" in flash(browser)
    assert "bad topic!" not in run(admin_call(s, "topic_list"))
    # delete
    from selenium.webdriver.common.by import By

    click_and_wait(browser, row_with(browser, "topics", "ConsoleMade").find_element(By.CSS_SELECTOR, "button"))
    assert flash(browser) == "notice: topic ConsoleMade deleted"
    assert "ConsoleMade" not in run(admin_call(s, "topic_list"))


def test_find_a_message_by_key_shows_body_and_properties(browser: Any, shared_standalone: Standalone,
                                                          seeded: Seeded) -> None:
    from selenium.webdriver.common.by import By

    s = shared_standalone
    open_page(browser, s, "/messages")
    fill(browser, "by-key", topic=seeded.topic, key="order-42")
    row = message_with(browser, seeded.keyed_id)
    assert '{"order": 42, "amount": 14.50}' in row.text and "TAGS=created" in row.text
    [m] = run(admin_call(s, "query_messages_by_key", seeded.topic, "order-42"))
    assert m.properties["UNIQ_KEY"] == seeded.keyed_id and m.offset_msg_id in row.text
    # the same message by its offset id
    open_page(browser, s, "/messages")
    fill(browser, "by-id", id=m.offset_msg_id)
    assert seeded.keyed_id in message_with(browser, m.offset_msg_id).text
    # and by time: the last hour of the topic (the default) holds it, the minute it was stored too, the
    # minute before the seeding nothing
    open_page(browser, s, f"/messages?topic={seeded.topic}")
    message_with(browser, seeded.keyed_id)
    stored = datetime.fromtimestamp(m.store_timestamp / 1000).replace(microsecond=0)
    minute = timedelta(minutes=1)
    open_page(browser, s, f"/messages?topic={seeded.topic}&begin={(stored - minute).isoformat()}"
                          f"&end={(stored + minute).isoformat()}")
    message_with(browser, seeded.keyed_id)
    open_page(browser, s, f"/messages?topic={seeded.topic}&begin={(stored - 3 * minute).isoformat()}"
                          f"&end={(stored - 2 * minute).isoformat()}")
    assert browser.find_element(By.ID, "nothing").text == "No message found."


def test_an_xss_payload_in_a_message_is_shown_escaped(browser: Any, shared_standalone: Standalone,
                                                       seeded: Seeded) -> None:
    from selenium.webdriver.common.by import By

    s = shared_standalone
    open_page(browser, s, f"/messages?topic={seeded.topic}&key=xss")
    row = message_with(browser, "evil")
    assert row.find_element(By.CSS_SELECTOR, "pre.body").text == XSS  # the text, as sent
    assert f"note={XSS}" in row.text  # the property too
    assert browser.title == "Messages · TidalMQ"  # neither the script nor the onerror ran
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []


def test_every_page_shows_its_data(browser: Any, shared_standalone: Standalone, seeded: Seeded) -> None:
    s = shared_standalone
    assert any(f" console http://127.0.0.1:{s.console_port}/ " in line for line in s._lines)  # the ready line
    open_page(browser, s, "/")
    assert "MASTER" in row_with(browser, "cluster", s.broker_addr).text.upper()
    open_page(browser, s, "/groups")
    from selenium.webdriver.common.by import By

    cells = [c.text for c in row_with(browser, "groups", seeded.group).find_elements(By.TAG_NAME, "td")]
    assert cells[1] == seeded.topic and cells[4] == "0"  # topics; max retries as the group was created
    assert int(cells[3]) == run(admin_call(s, "total_lag", seeded.group))  # lag, as the client counts it
    open_page(browser, s, "/schedule")
    # the deliver-time histogram: the timer messages due in 30 and 60 minutes, and in 20 hours
    # (test_cancel_a_scheduled_message, later in this module, cancels the one due in 60)
    histogram = row_with(browser, "schedule", seeded.topic).find_elements(By.TAG_NAME, "td")[5].text
    assert "hour: 2" in histogram and "day: 1" in histogram


def test_resend_a_dead_letter(browser: Any, shared_standalone: Standalone, seeded: Seeded) -> None:
    from selenium.webdriver.common.by import By

    s = shared_standalone
    assert len(run(admin_call(s, "query_messages_by_key", seeded.topic, "poison"))) == 1
    open_page(browser, s, "/dlq")
    fill(browser, "dlq-group", group=seeded.group)
    row = message_with(browser, seeded.dead_id)
    assert "poison: cannot be processed" in row.text and f"%DLQ%{seeded.group}" in row.text
    click_and_wait(browser, row.find_element(By.CSS_SELECTOR, "button"))
    assert flash(browser).startswith(f"notice: re-sent 1 dead letter(s) of {seeded.group}")
    # the client finds it back in its topic: the original and the re-sent copy, same body and key
    copies = run(admin_call(s, "query_messages_by_key", seeded.topic, "poison"))
    assert len(copies) == 2 and {m.body for m in copies} == {b"poison: cannot be processed"}


def test_cancel_a_scheduled_message(browser: Any, shared_standalone: Standalone, seeded: Seeded) -> None:
    from selenium.webdriver.common.by import By

    s = shared_standalone

    def pending() -> int:
        """Pending within the hour: the message cancelled (due in 60 min) and another due in 30; the one due
        in half a minute may be delivered meanwhile, and counts in another class ("minute")."""
        stats = run(admin_call(s, "schedule_stats"))
        return sum(r["topics"].get(seeded.topic, {}).get("histogram", {}).get("hour", 0) for r in stats.values())

    # the stats are the timer's published view, rebuilt about once a second: wait for both to show
    before = wait_for(lambda: pending() == 2 and 2, 10, what="both timer messages due within the hour in the stats")
    open_page(browser, s, "/schedule")
    fill(browser, "scheduled-search", topic=seeded.topic, key=seeded.timer_id)
    row = message_with(browser, seeded.timer_id)
    assert "remind in 60 min" in row.text and f"REAL_TOPIC={seeded.topic}" in row.text
    click_and_wait(browser, row.find_element(By.CSS_SELECTOR, "button"))
    assert flash(browser).startswith(f"notice: scheduled message {seeded.timer_id} of {seeded.topic} cancelled")
    wait_for(lambda: pending() == before - 1, 10, what="the cancelled message gone from the stats")
    # the client sees it gone: a second cancel finds nothing pending
    with pytest.raises(AdminError) as e:
        run(admin_call(s, "cancel_scheduled", seeded.topic, seeded.timer_id))
    assert e.value.code == ResponseCode.QUERY_NOT_FOUND


def test_reschedule_a_scheduled_message(browser: Any, shared_standalone: Standalone, seeded: Seeded) -> None:
    from selenium.webdriver.common.by import By

    s = shared_standalone
    later = seeded.timer_ids[3]  # due in 20 hours: moved to now
    open_page(browser, s, "/schedule")
    fill(browser, "scheduled-search", topic=seeded.topic, key=later)
    row = message_with(browser, later)
    assert "remind in 1200 min" in row.text
    (form,) = [f for f in row.find_elements(By.TAG_NAME, "form") if "schedule/reschedule" in f.get_attribute("action")]
    delay = form.find_element(By.NAME, "delay_s")
    delay.clear()
    delay.send_keys("0")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert flash(browser).startswith(f"notice: scheduled message {later} of {seeded.topic} on "), flash(browser)

    def delivered() -> bool:
        copies = run(admin_call(s, "query_messages_by_key", seeded.topic, "reminder"))
        return any(m.topic == seeded.topic and m.properties.get("UNIQ_KEY") == later for m in copies)

    wait_for(delivered, 15, what="the rescheduled message delivered in its topic")
    # the client sees it moved: it is no longer pending anywhere
    async def again() -> None:
        async with Admin(s.namesrv_addr) as admin:
            await admin.reschedule(seeded.topic, later, delay_ms=0)

    with pytest.raises(AdminError) as e:
        run(again())
    assert e.value.code == ResponseCode.QUERY_NOT_FOUND and "already delivered" in (e.value.remark or "")
