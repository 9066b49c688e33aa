"""Hard cases for a Chinese sentence splitter, each with the splits handlers/text/splitting.py's rules
call for (issue 8): book titles with ！ inside 《》, quotes, ellipses, numbers like 3.5, mixed
Latin text.

HARD_CASES are pinned by tests/unit/test_splitting.py; bench/splitters.py scores every splitter
on both lists, grouped by class.
"""

from __future__ import annotations

HARD_CASES: list[tuple[str, list[str]]] = [
    # A ！ inside a book title does not end the sentence.
    ("我读了《你好！世界》。然后睡觉了。", ["我读了《你好！世界》。", "然后睡觉了。"]),
    # Nor does a 。 inside a quotation; the closing quote stays with its sentence.
    ("他说：“我很好。你呢？”我没回答。", ["他说：“我很好。你呢？”我没回答。"]),
    ("「好。」她说。她走了。", ["「好。」她说。", "她走了。"]),
    ('他说："好。""不。"', ['他说："好。"', '"不。"']),
    ("他问：“真的吗？”", ["他问：“真的吗？”"]),
    ("（注：见上文。）下一句。", ["（注：见上文。）下一句。"]),
    # Decimal numbers and ASCII dots inside Latin words.
    ("价格是3.5元。很便宜！", ["价格是3.5元。", "很便宜！"]),
    ("I use Python 3.5. 我喜欢它。", ["I use Python 3.5.", "我喜欢它。"]),
    ("e.g. the cat. 好的", ["e.g. the cat.", "好的"]),
    # Runs of terminators and ellipses stay together.
    ("什么?!真的。", ["什么?!", "真的。"]),
    ("真的吗？？是的。", ["真的吗？？", "是的。"]),
    ("他来了……我走了。", ["他来了……", "我走了。"]),
    ("我们走吧；他们留下。", ["我们走吧；", "他们留下。"]),
    # An opener without its closer does not glue the rest of the line together.
    ("（未闭合。继续。", ["（未闭合。", "继续。"]),
    # Mixed Latin text: an English sentence is its own sentence.
    ("Hello world. 你好。", ["Hello world.", "你好。"]),
    ("没有标点的一句话", ["没有标点的一句话"]),
]

# More hard cases, with the splits the rules in handlers/text/splitting.py call for (issue 8).
EXTRA_CASES: list[tuple[str, list[str]]] = [
    (
        "我最喜欢《活着！》和《围城？》这两本书。你呢？",
        ["我最喜欢《活着！》和《围城？》这两本书。", "你呢？"],
    ),
    (
        "她写道：「今天很好。明天也会很好。」然后放下了笔。",
        ["她写道：「今天很好。明天也会很好。」然后放下了笔。"],
    ),
    ('他说："我很好。你呢？"我没回答。', ['他说："我很好。你呢？"我没回答。']),
    ("他说：“她告诉我‘别走！’然后哭了。”我很难过。", ["他说：“她告诉我‘别走！’然后哭了。”我很难过。"]),
    # Two quoted turns of a dialogue: the closing quote after a terminator ends the first.
    ("“还要咖啡吗？”“不了，谢谢。”", ["“还要咖啡吗？”", "“不了，谢谢。”"]),
    ("他来了(我看见了!)。你呢？", ["他来了(我看见了!)。", "你呢？"]),
    ("嗯……好吧。我们走。", ["嗯……", "好吧。", "我们走。"]),
    ("等一下...好的。", ["等一下...", "好的。"]),
    ("温度是-3.5度，明天是2.75度。好冷！", ["温度是-3.5度，明天是2.75度。", "好冷！"]),
    ("版本1.2.3发布了。请更新。", ["版本1.2.3发布了。", "请更新。"]),
    ("他考了99.5分!太棒了。", ["他考了99.5分!", "太棒了。"]),
    ("Tom is here. Mary is not. 他们都走了。", ["Tom is here.", "Mary is not.", "他们都走了。"]),
    ("请访问 example.com 了解更多。", ["请访问 example.com 了解更多。"]),
    ("我在用Mr. Smith的电脑。", ["我在用Mr. Smith的电脑。"]),
    ("他说：“我走了。你别来。", ["他说：“我走了。", "你别来。"]),
    ("好的）。然后呢？", ["好的）。", "然后呢？"]),
    ("你疯了吗？！我不信。", ["你疯了吗？！", "我不信。"]),
    ("What?! 真的吗？", ["What?!", "真的吗？"]),
    ("不！！！绝对不行。", ["不！！！", "绝对不行。"]),
    ("第一；第二；第三。", ["第一；", "第二；", "第三。"]),
    ("第一行\n第二行", ["第一行", "第二行"]),
    ("第一段。\n\n第二段。", ["第一段。", "第二段。"]),
]
