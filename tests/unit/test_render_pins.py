"""Pins: the content digest and the bytes every line format renders for fixed frames, as the
code before the flush path was optimised computed them.

Objects already in S3 carry the content digest in their metadata and adoption compares it, and a
buffer staged under one version is rendered by the next (invariant 5: a resumed flush re-uploads
identical bytes): neither may change for the same frames and spec. The pinned values were
computed by the code as it was before the rewrite; a change here is a compatibility break.
"""

from __future__ import annotations

import hashlib
import io
import random
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.support.harness import example_config_data
from tests.unit.test_formats_registry import CONTEXTS, frames_for, text_frames
from tidemark.config import parse_config
from tidemark.formats import RenderContext, RenderSpec, format_for, format_of
from tidemark.formats.compression import ZSTD_LEVEL, compressed, decompress
from tidemark.objects.content import ContentDigest
from tidemark.sources import KAFKA, KINESIS, RABBITMQ, PartitionId
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame
from tidemark.writer.stream import render_spec

TS = 1_763_709_153_000
EVENT = 1_795_245_153_123
WIDE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898

KAFKA_FRAMES = [
    Frame(
        RAW,
        0,
        TS,
        EVENT,
        b"o-1",
        b'{"order_id":"o-1","price":12.5,"big":123456789012345678901234567890}',
        (("source", b"web"), ("\u00e9t\u00e9", b"\xc3\xa9")),
    ),
    Frame(RAW, 1, -1, EVENT + 1, None, b'{\n"n" :\r\n 1}'),
    Frame(RAW, 2, TS + 2, 0, b"", b"[]", ()),
    Frame(RAW, 3, TS + 3, -86_400_000 * 365 * 1000, b'k"\\', b'"str\\u00e9\\n"', (("h", b""),)),
    Frame(
        DEAD_LETTER,
        4,
        TS + 4,
        NO_EVENT_TIME,
        b"\xff\x00",
        b"not json",
        (("source", b"web"), ("bin", b"\xff\x00")),
        "invalid_value_encoding: bad \u00e9",
    ),
    Frame(DEAD_LETTER, 5, TS + 5, NO_EVENT_TIME, None, b"", (), "reason"),
    Frame(RAW, 2**63 - 1, 2**62, 253_402_300_799_999, b"x" * 300, b'{"a":"y"}'),
]
KINESIS_FRAMES = [
    *(frame._replace(offset=WIDE + i, headers=()) for i, frame in enumerate(KAFKA_FRAMES)),
    KAFKA_FRAMES[1]._replace(headers=()),
]
ALL_FRAMES = KAFKA_FRAMES + KINESIS_FRAMES


def many_frames(count: int, seed: int, *, odd: bool = True, dead: bool = True) -> list[Frame]:
    """``count`` order-like frames over several render chunks, with the unusual cases mixed in
    at random (``odd``): null, empty, quoted and non-ASCII keys, headers of several kinds,
    values with raw line breaks, event times around the epoch and negative timestamps -- and
    dead letters (``dead``)."""
    rng = random.Random(seed)
    frames = []
    for offset in range(count):
        event = EVENT + rng.randrange(-3_600_000, 3_600_000)
        roll = rng.random() if odd else 1.0
        key: bytes | None = f"o-{offset}".encode()
        value = b'{"order_id":"%032x","price":%d.%02d,"n":%d}' % (rng.getrandbits(128), offset, offset % 100, offset)
        headers: tuple[tuple[str, bytes], ...] = (("source", b"web"),)
        if roll < 0.01:
            key = None
        elif roll < 0.02:
            key = b""
        elif roll < 0.03:
            key = 'k"\\\u00e9\n'.encode()
        elif roll < 0.04:
            headers = ()
        elif roll < 0.05:
            headers = (("source", b"app"), ("trace", "é".encode()), ("", b""))
        elif roll < 0.06:
            value = b'{\r\n"a" : [1,\n2]}'
        elif roll < 0.065:
            event = rng.randrange(-5_000, 5_000)
        if dead and rng.random() < 0.003:
            frames.append(Frame(DEAD_LETTER, offset, TS + offset, NO_EVENT_TIME, key, b"\xff not json", headers, "bad"))
        else:
            frames.append(Frame(RAW, offset, TS + offset if roll > 0.07 else -1, event, key, value, headers))
    return frames


def kinesis(frames: list[Frame]) -> list[Frame]:
    return [frame._replace(offset=WIDE + 2**20 * frame.offset, headers=()) for frame in frames]


MANY = many_frames(3_000, 7)
MANY_KINESIS = kinesis(many_frames(1_500, 8))
#: chunks without anything unusual, and with everything unusual but dead letters
CLEAN = many_frames(1_200, 9, odd=False, dead=False)
CLEAN_KINESIS = kinesis(many_frames(1_200, 10, odd=False, dead=False))
MIXED = many_frames(1_200, 11, dead=False)
MIXED_KINESIS = kinesis(
    [frame._replace(timestamp_ms=abs(frame.timestamp_ms)) for frame in many_frames(1_200, 12, dead=False)]
)
#: values large enough that a chunk of frames is rendered in several parts
LARGE = [
    frame._replace(value=b'{"blob":"%s","n":%d}' % (b"%x" % frame.offset * (8_000 + frame.offset), frame.offset))
    for frame in many_frames(700, 13, dead=False)
]
SETS = {
    "many": (MANY, MANY_KINESIS),
    "clean": (CLEAN, CLEAN_KINESIS),
    "mixed": (MIXED, MIXED_KINESIS),
}


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _renderable(frames: list[Frame], context: RenderContext) -> list[Frame]:
    """The frames a context can render (text encodings need UTF-8; dead letters are base64)."""
    return [
        frame
        for frame in frames
        if frame.kind == DEAD_LETTER
        or (
            (context.key_encoding != "text" or _utf8(frame.key or b""))
            and (context.header_encoding != "text" or all(_utf8(data) for _, data in frame.headers))
            and (context.value_encoding != "text" or _utf8(frame.value))
        )
    ]


def _render(kind: str, codec: str, frames: list[Frame], context: RenderContext) -> Callable[[], bytes]:
    def body() -> bytes:
        out = io.BytesIO()
        assert format_for(kind, codec).write(iter(frames), context, out) == len(frames)
        return out.getvalue()

    return body


def cases() -> Iterator[tuple[str, Callable[[], bytes]]]:
    for source, frames in ((KAFKA, KAFKA_FRAMES), (KINESIS, KINESIS_FRAMES)):
        partition: PartitionId = 3 if source == KAFKA else "shardId-000000000007"
        for key in ("text", "bytes"):
            for value in ("json", "text", "bytes"):
                for header in ("text", "bytes") if source == KAFKA else ("text",):
                    context = RenderContext('or"d\u00e9rs', partition, key, value, header, source=source)
                    chosen = _renderable(frames, context)
                    for codec in ("none", "gzip", "zstd"):
                        yield f"jsonl/{source}/{key}/{value}/{header}/{codec}", _render("jsonl", codec, chosen, context)
    for name, (kafka, kinesis) in SETS.items():
        for source, frames, partition in ((KAFKA, kafka, 3), (KINESIS, kinesis, "shardId-000000000007")):
            for key in ("text", "bytes"):
                for value in ("json", "text", "bytes"):
                    context = RenderContext("orders", partition, key, value, "text", source=source)
                    for codec in ("none", "gzip", "zstd"):
                        yield f"jsonl/{name}/{source}/{key}/{value}/{codec}", _render("jsonl", codec, frames, context)
    large = RenderContext("orders", 3)
    for codec in ("none", "gzip", "zstd"):
        yield f"jsonl/large/{codec}", _render("jsonl", codec, LARGE, large)
    for kind in ("text", "bytes", "csv"):
        for encoding, context in CONTEXTS.items():
            if kind == "text" and encoding == "bytes":
                continue
            if kind == "bytes":  # version 1, now RabbitMQ's (Kafka's is version 3: see below)
                context = replace(context, source=RABBITMQ)
            frames = text_frames(line_breaks=False) if kind == "text" and encoding == "text" else frames_for(encoding)
            for codec in ("none", "gzip", "zstd"):
                yield f"{kind}/{encoding}/{codec}", _render(kind, codec, frames, context)


def digest_of(frames: list[Frame]) -> str:
    digest = ContentDigest()
    for _ in digest.wrap(frames):
        pass
    assert digest.records == len(frames)
    return digest.hexdigest()


#: sha256 of each case's object, as the code before the flush-path rewrite rendered it
PINNED = {
    "jsonl/kafka/text/json/text/none": "f682ccbad2bd54fef540d1a446a09a1713481cdb163bc318974115e86ee1de72",
    "jsonl/kafka/text/json/text/gzip": "99562d0a47bbb7e5392a5488642b767f2968522dca1f8db452c4c2ffb6295eaf",
    "jsonl/kafka/text/json/text/zstd": "98a62494ed0e86db37d52430f87a2b88e318cf9b31f46b429d9bd8ad9446a954",
    "jsonl/kafka/text/json/bytes/none": "19d8238b0745de8f1db2c3932273d16bfc9ff5635c63da2f33111afc3fc23bc7",
    "jsonl/kafka/text/json/bytes/gzip": "ef05bf21dc0deb3d0a0fac12160c00f0a7bfc2716e7183f6814138001538e455",
    "jsonl/kafka/text/json/bytes/zstd": "7a961a05aa8df6cb5adc269cbdb565664943e1f1003249bcf7a7903ae2a55ac8",
    "jsonl/kafka/text/text/text/none": "4684146b175c58976693aec4876fb3902ce0ceb569e2145c5ef88369804e943e",
    "jsonl/kafka/text/text/text/gzip": "ce9e211dcf701e77107c4826be7cf640ff9ff28c6f18d6e509ddeba59f9f0617",
    "jsonl/kafka/text/text/text/zstd": "9911ea6653a41c038911ae9436fd63a1dca23a63a2ac616ea1516de2b4c678d4",
    "jsonl/kafka/text/text/bytes/none": "57c99d6bfa01053948f9fe8bb7704269cd577dad8201ee16533c80dc8db76328",
    "jsonl/kafka/text/text/bytes/gzip": "57837baf7a3b234cdde17ca8fdb51f36dad39cd6ae8ae27b71568c0d4a94c1d6",
    "jsonl/kafka/text/text/bytes/zstd": "f7097332d6476988a129936bf3cb9ea3e9b612478d581700ea1f72d27f294d6a",
    "jsonl/kafka/text/bytes/text/none": "7177544a38383853e5f912895461ba965f51a8a4ad7376db7ff439952fb27730",
    "jsonl/kafka/text/bytes/text/gzip": "b997cddd6c71050f0261d51a450c2fc35c14d1110c26890db133b994432db0b4",
    "jsonl/kafka/text/bytes/text/zstd": "3273c9d8614c1f88026691faac579523b93074374809639d741e1415bfa1b56e",
    "jsonl/kafka/text/bytes/bytes/none": "10d01e188b6f881285d0e618b2224e3dd57d49c528a5f00755f221f353c0803c",
    "jsonl/kafka/text/bytes/bytes/gzip": "bc6be704d70728540758cd0eae6c65ff4c71eb74bc70e56fbf226d87f14f560e",
    "jsonl/kafka/text/bytes/bytes/zstd": "9a019bea691864fdbd31a9729970cd36f111aa6c3b3b1a5b9d2736bac7b4420d",
    "jsonl/kafka/bytes/json/text/none": "b6e91e26815a4b3588414e6c2795bca81f363b92dacf0738d5c71fd90097b469",
    "jsonl/kafka/bytes/json/text/gzip": "965d981af2c43b38c42deb0d6da4383757a9ba4fd65bb88722f13ad3c0261f64",
    "jsonl/kafka/bytes/json/text/zstd": "2f69fbae3fbf8e06a2a407e2f928d96bdd1c1b7108e4b705b58c84f9839d8e59",
    "jsonl/kafka/bytes/json/bytes/none": "4bde37cf309e0358d1246b11977353e1db75cf5427b657d726d8605edc6244a8",
    "jsonl/kafka/bytes/json/bytes/gzip": "1a1940067c28298c039086c49d1da14936a970a895fe7a2b384fd41d7e243826",
    "jsonl/kafka/bytes/json/bytes/zstd": "d85d476a7feaad8017dd91ac833b1f199fda5d5d9a2d22f44a5853f6b68b1d90",
    "jsonl/kafka/bytes/text/text/none": "76f3f4e8538810d9a0b5a0556208df10356dc303fb82f0aa8132f544d78131f9",
    "jsonl/kafka/bytes/text/text/gzip": "d55b513843698f78498e5741f98a6ab7349b4ed7795f4942c93f78fbbfa410d9",
    "jsonl/kafka/bytes/text/text/zstd": "89027b2aa9415e8e54e4d08a889f1de5229125d1da0e63d4ca0f128586778ab0",
    "jsonl/kafka/bytes/text/bytes/none": "4909f3897376116be516fedc57e69b5e1786e8d9145d40bf15e5567744657a0c",
    "jsonl/kafka/bytes/text/bytes/gzip": "981598d471384796e017cba4ec5604edd0817ac2bff4c6094a0297aa122b59e9",
    "jsonl/kafka/bytes/text/bytes/zstd": "8bdce79d6b7d4a6f2c780240ee65b6b02b3f47f0496312e0a1a7d6e69f4f4dcb",
    "jsonl/kafka/bytes/bytes/text/none": "deaace3f6a2e65549dc232afed0e3093d454eb7a55d4a312e213c9d24ed06871",
    "jsonl/kafka/bytes/bytes/text/gzip": "b3b7aaafc62031388872731fab6304db93ed8749e643d5eb4ed4eeaebda2be15",
    "jsonl/kafka/bytes/bytes/text/zstd": "c174a1f338857dc04fa82bd362b5b4db75f1fb56a129107faa61cb768aa54f4c",
    "jsonl/kafka/bytes/bytes/bytes/none": "b7fa6ac45ac136684742d3153a8443ea4873a863e0750e8e02acd1a8bd9f94bd",
    "jsonl/kafka/bytes/bytes/bytes/gzip": "51d3eef3333f8ca4490a9a8f21a8d74d3d1f1c28047bb1bb7f4f1db4bf1d982d",
    "jsonl/kafka/bytes/bytes/bytes/zstd": "077f44cdc9128119a8c271f0d1211329bc418f56371b668dbb164331b4fa8374",
    "jsonl/kinesis/text/json/text/none": "3c2fcdb1c8fffa3b7ee022ac8b2b44153e2f4ddb09d583f80095546aff0d2d8f",
    "jsonl/kinesis/text/json/text/gzip": "8f14a193369ed03abfbc61c641976c7b1834cbc1cf8e43a5b2729e83cd247980",
    "jsonl/kinesis/text/json/text/zstd": "473cbbd9c70ec456ef50a73027dd3c80d814e3b1a5b4c9b6946b57f5ba930712",
    "jsonl/kinesis/text/text/text/none": "391f3e078da714450566c57a5b7dada003c3b32c5e2cca7e6b7ebd65980fae9c",
    "jsonl/kinesis/text/text/text/gzip": "7537911b079662716a369b0bf4d5dd5e591a646850a83ea6fa0a1fc4877ed491",
    "jsonl/kinesis/text/text/text/zstd": "c29c43400775b088f1dc4bbee063eb9fcfa3a6507550b7403f6f4403c061bfa5",
    "jsonl/kinesis/text/bytes/text/none": "6ccbe513fec90472725cb9cd513c4cfd6c7f73d7fac36ace8823007835725fee",
    "jsonl/kinesis/text/bytes/text/gzip": "2979a48c401ee7a06e52f14ea2530d41278d385371f276e66306e83d826c3192",
    "jsonl/kinesis/text/bytes/text/zstd": "688379224ffbde37b1da03ccf68eed34fe836020ca3c1b609da5b8bc1fc988ae",
    "jsonl/kinesis/bytes/json/text/none": "aa65ae56df73f0a1f4e85e3fdf03d4decd854b0b447980c7eb8b88c258a66e77",
    "jsonl/kinesis/bytes/json/text/gzip": "287de1f7b1afd8c8c5e25dba93562a70a5f140166e95943b61bdc4fabbedc692",
    "jsonl/kinesis/bytes/json/text/zstd": "a9eb06330e82f8e276abaafedbb8d98c97ee1ed1cbab0cf6b16130c9830d5831",
    "jsonl/kinesis/bytes/text/text/none": "1a57e97bc72bd4ca0c9db9a604624419cc97bba4c5ce0643eed2da146bdbfa8e",
    "jsonl/kinesis/bytes/text/text/gzip": "18b807724996f063b782c2dc53972e62095c5131998a896cf907360a488b9dcf",
    "jsonl/kinesis/bytes/text/text/zstd": "4606f6d27acab9094b4b0ca05884209bcce75e5e23891f8f57d1102dfbf51c26",
    "jsonl/kinesis/bytes/bytes/text/none": "2045854bca1f314208383594d932fd8cbf11286a563f910b66012044b11dd836",
    "jsonl/kinesis/bytes/bytes/text/gzip": "b552a1b16f339ae944777098da2e803d4640c5bd990f1e5f50d9005636635cd9",
    "jsonl/kinesis/bytes/bytes/text/zstd": "cba3731228fda39a1bda9eb3276de0edc6643bf61b15e62b4d1c7299820c87e1",
    "jsonl/many/kafka/text/json/none": "74f4d6d5532cd378c623bc9cc31b7ba252a401f5a6a97323678a36e6ffb9113a",
    "jsonl/many/kafka/text/json/gzip": "61e59d00ae71e08108a2c212e5c8c824ca97751daacbb6b001a62c6a18c7a28d",
    "jsonl/many/kafka/text/json/zstd": "067f029dc37c948522b7805614362503463f4be2c5bd313546addd5965725b07",
    "jsonl/many/kafka/text/text/none": "7d0778a9a4e15ddd870ae627876eaffc21f6f9eb7302e15047bd2d9a0ef116dc",
    "jsonl/many/kafka/text/text/gzip": "0a4ea3e2abc025f0e7d3546049f19c1bd5ae1969d18601709d97889e4cc174dd",
    "jsonl/many/kafka/text/text/zstd": "e24e84d92f35a844505ce447390710a751fa9f5734a1f8575ac248e29cb55b1d",
    "jsonl/many/kafka/text/bytes/none": "82543a1122d8ed184da651372ca2b4c1c12a86fa8f0c1ee1b33fe00b1b3a9769",
    "jsonl/many/kafka/text/bytes/gzip": "5e7ba5e7d4d2f6403f757861a8a9f4df1c9f5a6ee367b192f17e8e5bf798f438",
    "jsonl/many/kafka/text/bytes/zstd": "e91bfb76fdb08ec4e1da52fde26f3610c3dc0fe5653529f7e0b768d911ec368a",
    "jsonl/many/kafka/bytes/json/none": "82820d32ad14b828a7fb5ea3b3f2fe20a3f962b111099695b40737db2f231014",
    "jsonl/many/kafka/bytes/json/gzip": "008dea9dc4576f8ff7d85ddbec3120391f3cda8db1e1cc3c9fa8fc4141e97c24",
    "jsonl/many/kafka/bytes/json/zstd": "d6eed0b0185fdad3e054b77acbd57217bfc76ec439a8f51fca7bcbad1a2a2633",
    "jsonl/many/kafka/bytes/text/none": "0fa7a3f9baa2dbe61f51450e16f4c5fdac563a0a80309f19d0b461e57ceb500d",
    "jsonl/many/kafka/bytes/text/gzip": "f0fad1caffc05e2679769782f602bd9406a2f2caa31393ecf614f665330dbb05",
    "jsonl/many/kafka/bytes/text/zstd": "e854481c28e3773bcc712081ee7e31594b9151054d8a2d2bb3e60451ed321e33",
    "jsonl/many/kafka/bytes/bytes/none": "28d063cf03d2475bedb9ae48eb5ea81da5d203dcb1c74086d2e153c2b3077b72",
    "jsonl/many/kafka/bytes/bytes/gzip": "1f9605b077313472923961d922527fee990e9ffeb51176ccdd4e5a0287485b89",
    "jsonl/many/kafka/bytes/bytes/zstd": "6668cd67ba8d003b1de9bab6c6ac21ac93df2a047aa46b3d3cd6afe394791abc",
    "jsonl/many/kinesis/text/json/none": "74c205aa64db197296d54962a83268dcdcad279825b7282cc5ec720941a21397",
    "jsonl/many/kinesis/text/json/gzip": "7e02df9763d22b127e3eed0772a8ba546e57b72afc043de7b65b58b8022f7fda",
    "jsonl/many/kinesis/text/json/zstd": "f78deef2b48ac8f07a3f048ad4d54560f81ba35d9d79d72a8ea9524c064d49dd",
    "jsonl/many/kinesis/text/text/none": "c2ec6acf45231fae51e5839fa41ea2994d40cbe5c60e1235628d9fd1cd3381fc",
    "jsonl/many/kinesis/text/text/gzip": "b1776245cc2929fb6b36e22089a984a40b3a1ace758fc21c38206b22318f5d99",
    "jsonl/many/kinesis/text/text/zstd": "a4f734e9ba8ce28e720368aac310086c7ef44c7cbc05438ce6031b0752708aee",
    "jsonl/many/kinesis/text/bytes/none": "a9f74aad08eb10f5c854d216b20955c7b1d234df004daf49d33e8f4ab887c53f",
    "jsonl/many/kinesis/text/bytes/gzip": "f98c4f22d29853d52f9e6738fb9eaf5f99ed2633362ac9c416790a7234e4f088",
    "jsonl/many/kinesis/text/bytes/zstd": "567db025dddd05e0bfba7b854f149f0f1594fb8e006998d25b2f22c21d48eefb",
    "jsonl/many/kinesis/bytes/json/none": "4f91ce902c2029f9e46d1d74c526efb957be27733b92be0cbfdb9cc49c1788ea",
    "jsonl/many/kinesis/bytes/json/gzip": "fdd90e16adec59b3fbb8ae57945b47fdd57b792c05273a2316edc6ce1978c0a9",
    "jsonl/many/kinesis/bytes/json/zstd": "ffabd2237bf1e015ed8941377f97166db71661f4149e978d2aea1fdcfc837793",
    "jsonl/many/kinesis/bytes/text/none": "39bd5a6e5b282f3f4af3a6883d39fea1b5ef65fe23666b927b2fc0692dd3b44d",
    "jsonl/many/kinesis/bytes/text/gzip": "8bb13d4793b98acf50aa5324154c9d0d68b315203e52f96abec927c16273a8cd",
    "jsonl/many/kinesis/bytes/text/zstd": "7cf04d133928b229549a9ab434a8c2dc5cf88be5dacc43d39450fe6244cf1649",
    "jsonl/many/kinesis/bytes/bytes/none": "745f1c661f43a6b1d2596e37e05d8faf560958c89d4a369c00aed3e24bfa6e05",
    "jsonl/many/kinesis/bytes/bytes/gzip": "e80751e648b9945d4343965bceb5f897930cd532db7d3adbb9b4acd345ef593f",
    "jsonl/many/kinesis/bytes/bytes/zstd": "123b7680dd73727b94aacec6d7d7e938924602c1d03497f54d3055c15f44f930",
    "jsonl/clean/kafka/text/json/none": "0aaf311ca7d199d1cb3ac13c61fee2aa259b972dfad1855248a3921c26ee53fe",
    "jsonl/clean/kafka/text/json/gzip": "3f29b0feb9d157a958e462b76fa1b0fa88c0404d9d2a5a30be6d62b0e616a665",
    "jsonl/clean/kafka/text/json/zstd": "bde60b88c017e477346f8fb966c605fa18022b8e2c60be943d13fc3806129899",
    "jsonl/clean/kafka/text/text/none": "38594d4ffd361d29fba2d867fe566607e50deab1946e72a45f5493820d318f43",
    "jsonl/clean/kafka/text/text/gzip": "faae757b0631132b3087833f647c63cf1e09b8c958e903f17280d5aef3ef3a75",
    "jsonl/clean/kafka/text/text/zstd": "e73fecc4330ff8c299277ffc30dee788b2fa046323b7ca04d83fe3d1cceba727",
    "jsonl/clean/kafka/text/bytes/none": "8f5d0b0794f7f5444ffdc7d015940f356f9bbb9b333d9b64c3b074ef864edd87",
    "jsonl/clean/kafka/text/bytes/gzip": "92e8a992b187c47a97a7dd51aa9a3598fb8eb149d6f6d2b2427fb80aabbe958c",
    "jsonl/clean/kafka/text/bytes/zstd": "5b3de32e470dee15ce7075d1fdb59bba4da14a30613cc3561caebb0246bd3b7c",
    "jsonl/clean/kafka/bytes/json/none": "4f451dd04b2571ff6d349f8f7babe4b4a32e9c0cde60779bcef2a74b05c180ef",
    "jsonl/clean/kafka/bytes/json/gzip": "914b3355a8af9620867ef938a8d72f81e1fc5723bd01ffa6ca1ea2b9f3d3bf72",
    "jsonl/clean/kafka/bytes/json/zstd": "229bc6763c77edc01ee4a42ae0d49513a83716a1b34d19717ab7d750d5a95dcf",
    "jsonl/clean/kafka/bytes/text/none": "c8271a62469251210df1197b948f66e3f6834bc4325a95e7bb1a550138e5fb82",
    "jsonl/clean/kafka/bytes/text/gzip": "3766d9720ec93a32e01c319d40af464ce819f6cb2fd41f498d27cd455add7c90",
    "jsonl/clean/kafka/bytes/text/zstd": "41e21264881a255aeaba71fb43e3a880304c29118146397c0a776440c4e5bad3",
    "jsonl/clean/kafka/bytes/bytes/none": "816cd476cf4b31ae06ca40608d39d322e79de071f4aa92f9beb30b8b699599c4",
    "jsonl/clean/kafka/bytes/bytes/gzip": "1dfef49be565e2c1205b92a43842aa954c4d34f8d40442e562c6a1db70830671",
    "jsonl/clean/kafka/bytes/bytes/zstd": "d47f83b4cd948a3a61e59cd65f71b161037d3763a613ee4483f438ac42dcb8d0",
    "jsonl/clean/kinesis/text/json/none": "86ae26a60b39c8803c9c43cfc64e27be94dc984948f85811e607ac0c2dc60ff2",
    "jsonl/clean/kinesis/text/json/gzip": "8fb0dfbc7da45c33eef23f475d6267b72f0942115b52df136abb36608a585996",
    "jsonl/clean/kinesis/text/json/zstd": "d54e11d5ca21936051af8af375fa90311971a7bf95900aad5bfb24a07d6e4ba7",
    "jsonl/clean/kinesis/text/text/none": "4e81d3f8ca53f4ca79115b5d4e422cf82527752aca2789811d96d6fd4fbe25c6",
    "jsonl/clean/kinesis/text/text/gzip": "2f7ed5867e08f09f11d812bb7cc9f990618ced6c9f008a03a4f57d49b9cddf51",
    "jsonl/clean/kinesis/text/text/zstd": "fd7bb503cfc8e15e0927ea81d38b8984a68249edeb86537f42de4fd7a7ca9e5d",
    "jsonl/clean/kinesis/text/bytes/none": "256649d1686cf5e4a0a3fdf65073f2b73ca405923559825dada51fa3e46192f7",
    "jsonl/clean/kinesis/text/bytes/gzip": "03d133fbd2058a81fefdb01c9f10e6a55051774fdcf25b4c5aec9f696ce96ce8",
    "jsonl/clean/kinesis/text/bytes/zstd": "f98d1008ab58ffd60da6b012fa14a48b08fdf2625ce9164eac230a8141a4355f",
    "jsonl/clean/kinesis/bytes/json/none": "d9ecef37008c16e8fa8418886fcf122a3d24ac554b7e8989fd8643eebe569d02",
    "jsonl/clean/kinesis/bytes/json/gzip": "891ece9becca52cb629876bd2a13e239062fde52a2b13e7b3d2ddb9768e24f80",
    "jsonl/clean/kinesis/bytes/json/zstd": "1e561582b68374edd95e8f2b144a72e86fad39c00f8f302c41276fd24553c1ba",
    "jsonl/clean/kinesis/bytes/text/none": "2f18bc0fb4daca3ec95efe056ba2b9ee5b395883be5aa1ea048b20455bdc4399",
    "jsonl/clean/kinesis/bytes/text/gzip": "7732e9ccb06f1f30772bff1a750967a90918d8c759c8a0670a7c20ee470cb243",
    "jsonl/clean/kinesis/bytes/text/zstd": "89d1405a24a748894d92f8aefb0a89d211ac6cd19c17901bd52342a7844c3fd1",
    "jsonl/clean/kinesis/bytes/bytes/none": "087e97feaa151b6812cee6a95b25907efae7d169cb1a25a8381b3dd6008cac74",
    "jsonl/clean/kinesis/bytes/bytes/gzip": "f417546d816744e3a6c617732bf756fcd68b7ce50a1b127f07a383e66b8c2742",
    "jsonl/clean/kinesis/bytes/bytes/zstd": "124ef2443e331873f385045ee763eb7ccc15189fabeee3432a3f4299df04735b",
    "jsonl/mixed/kafka/text/json/none": "94183f02000a24b17299ad94808c514bf3d32f52662515509ecfa6fa23476178",
    "jsonl/mixed/kafka/text/json/gzip": "efac1b9fdee84b5e77f97fbfc7a70ec2821181f6f5bdfd4f1bfe910d73e22480",
    "jsonl/mixed/kafka/text/json/zstd": "d3a289acf6dd8c30657ae4874b87946e07fe015b21a626d0933f480cf54fa974",
    "jsonl/mixed/kafka/text/text/none": "388537051bda3c927f50c785eca26dedee6bb04345452444f2042ce52e55b19c",
    "jsonl/mixed/kafka/text/text/gzip": "54d7a331646967549d8f5575038d21db09579696cbee4c341d5a8068ac310e9e",
    "jsonl/mixed/kafka/text/text/zstd": "e37fa071c3180962ef778d01a4f9eb50cbea857bebcced919f1d02011545a890",
    "jsonl/mixed/kafka/text/bytes/none": "0bd8955d3620b9de0e56523b0b0e96437919e4e9a9cee15a3f92682fd49b845d",
    "jsonl/mixed/kafka/text/bytes/gzip": "04c98522a5955920252621bb638ff118d74ce538e3c261e20e3eda291e8e420d",
    "jsonl/mixed/kafka/text/bytes/zstd": "ec4b1d46e991e69bfadc03ff1255bfaef57b08fc26468e839a662297ff7fb155",
    "jsonl/mixed/kafka/bytes/json/none": "40e9e94ccc30a2909c0b06f40d238ef4c0842bf11170b2d47aecad934e7902bd",
    "jsonl/mixed/kafka/bytes/json/gzip": "d8e331be4f4716a50dbc38f3ef98f8a08bdddc31b034a6252ed69da6bfb4d978",
    "jsonl/mixed/kafka/bytes/json/zstd": "0ebf8cf61bf604b647548ace3e60f34d5a0a7e8c6c4b5ea220e7b8e184bf4891",
    "jsonl/mixed/kafka/bytes/text/none": "57f17209b351d7ffed1e5d4cd4193295208370af89c3c7c13e034abab2f4ded9",
    "jsonl/mixed/kafka/bytes/text/gzip": "b7091e70b557f1f73f561cb669f410f22a6ee3e597b54ce3952359d2f30447d1",
    "jsonl/mixed/kafka/bytes/text/zstd": "9d74dbd48c16e15f32fd2c38306b538b865343cd45b140d297bed13565384634",
    "jsonl/mixed/kafka/bytes/bytes/none": "bc132c5f5fb56a875d3a98e19001cf0fca1daa3ecb6203269d85408e356c3636",
    "jsonl/mixed/kafka/bytes/bytes/gzip": "0151f4adecd934d7241810431b6286aaa942d247d2aab0c730a28fce9779faa4",
    "jsonl/mixed/kafka/bytes/bytes/zstd": "b7739a4f52fc1ffa267c9c94add5b81066e222b80698f6724de7956630b6a80b",
    "jsonl/mixed/kinesis/text/json/none": "b650bdfa9ba2636a532c2e58e5e8baf16a8a7515fad50a37d01289edad48d1fe",
    "jsonl/mixed/kinesis/text/json/gzip": "35f78c851b8bfa99f2a03287ca9b3864e110e46ab8cbd338871c530699348775",
    "jsonl/mixed/kinesis/text/json/zstd": "69b44952c3de1afcec71be15ee547e17a6b361b2e770f6a922d06586403adcbb",
    "jsonl/mixed/kinesis/text/text/none": "e493f057bfe742a8bb9585833f6fc5533ca23075fb2d364ac3dee6032f9b0a0d",
    "jsonl/mixed/kinesis/text/text/gzip": "9b0a5cf37f995a1b765c49d2b12f6d25c62fff55ab017485580d6dbfb46f5a4d",
    "jsonl/mixed/kinesis/text/text/zstd": "785d54106a43d331f2c99ee331b8133ab81e758eb80466376ef476d7b01b9d40",
    "jsonl/mixed/kinesis/text/bytes/none": "df8db956deedfaf69b4d1ab9cdcae7e24a27f8a355c2571c66b3d6cac1a43a89",
    "jsonl/mixed/kinesis/text/bytes/gzip": "a99fb9f91e61a892f18a69387a51e5351ae39482eb45c9fdc4dee3ec8cde3ffd",
    "jsonl/mixed/kinesis/text/bytes/zstd": "352b24b4b2040d0ba707e963908c752283b499ba81ca9ae0f410d617890f9ce6",
    "jsonl/mixed/kinesis/bytes/json/none": "1804984774844b728229a433382ca1ed1c316abb85c718e000aaf1a873d659bf",
    "jsonl/mixed/kinesis/bytes/json/gzip": "b389a1e11b2119cdd15b5214b747e4f369259cf38804c721bf7b1f22e2a2654c",
    "jsonl/mixed/kinesis/bytes/json/zstd": "7b3a69996b7286103e6eb1b3351d8149ef9e4f14f65a70de179801c8a44e38a9",
    "jsonl/mixed/kinesis/bytes/text/none": "e3e64a1a77c4c1f8c8cba61a6b8b5b4e79c10be96b0d622265aafc3f53c5ac64",
    "jsonl/mixed/kinesis/bytes/text/gzip": "dac9830a0766877df7e45dca6d3c2664b6ebbda220bc2b2116a1e5e63bec5d01",
    "jsonl/mixed/kinesis/bytes/text/zstd": "733402f978deb98a6acb7bbf811f256d13d31fe16a407c26bf171748f7c9866d",
    "jsonl/mixed/kinesis/bytes/bytes/none": "3d518cf5f1d24b26b4855073553f013b84ab89de4e8808a04313cc5c3797ae2b",
    "jsonl/mixed/kinesis/bytes/bytes/gzip": "4268875a24b848c045f0441ba308704b5b713dffa1e5e2ec8f94ba073de7ce33",
    "jsonl/mixed/kinesis/bytes/bytes/zstd": "cbb0f70358126e368affe9e107db5071a2066109b0b4f3553528f1cf1a26b1f7",
    "jsonl/large/none": "7e2f010b847113daacaf0906afedf6d7c09537fe7ccb39b63590986bed40d815",
    "jsonl/large/gzip": "25af4e3cb443d4da99044d9aeb060824ba87bdafc8f3dd60e3a7e095f691ef93",
    "jsonl/large/zstd": "3ff4bf880251429629edf10b4bcd506d466e36d4af0da8cbad745862e5076372",
    "text/json/none": "803bb003c92b5f20c5d08952f7e2eeb1f702d5a3755f9864d1af76a2f736fcd3",
    "text/json/gzip": "0be6fd2984a8fc68f862a9b6b7017cc19a62a52274581023734768f885d310f7",
    "text/json/zstd": "62ae039faea5aa7cc138f24b2529994389f5ae76e704e6d7803a1b62e0e41bdb",
    "text/text/none": "ed6a343ba128fd0f14b47d89df2bd27ba1eeab16abb0bce43e7e3b1fc28ff053",
    "text/text/gzip": "02f20a44df5df92cd93898727fad9a640cc5d731ce61d72e73d63999cdde9ada",
    "text/text/zstd": "476acf82d15f651f96388bc932d459713b35237321c95582ba7840be1bbc531d",
    "bytes/json/none": "ff2d69189a1ee9a1c1d7a247ab886bbb16bb1298fce00bcf54e78a2b2b483f13",
    "bytes/json/gzip": "e9dc54a616693f2cd77c4ba6e4e3ca9a5ebe3271e184828aa86c6b7c711c7813",
    "bytes/json/zstd": "51ec79aae9c3f91d0ddd17a1ad8c2d29db0aa2b1b84b6aafa23de800b2b13add",
    "bytes/text/none": "fa7c086f864037e47425af72e605a5333ce59e0a52d2f5195a058f4ae4baa4e8",
    "bytes/text/gzip": "b0855effcad0e552ece61efb114325fb044ec9dd6b4e1eede2baacf265284387",
    "bytes/text/zstd": "c51493703f13df5597753f14787d8cad7e24bdb3ca0c09d874b671501f377e19",
    "bytes/bytes/none": "9f24a7057d83dff14a03cfb40cceb81727a6312bcf00b04adb2e18a6e063bc25",
    "bytes/bytes/gzip": "5b9da2effcb658d9ee9908d28089f93442962d76a5f0575178b95a2321da1639",
    "bytes/bytes/zstd": "9ceebcd2c79544709664d51107d1de4eddd6ed65764d1fd01995a1dbd47370d1",
    "csv/json/none": "ea32fc896c8ea47e204805d45b1c75be60696180ead2f899d1a41e34a2163b98",
    "csv/json/gzip": "fb741c4b28444e8bfe053158161d6636fc75385003051377cbdb87c761058f27",
    "csv/json/zstd": "cf5835710eaaa2be65fc4ac85b284c5d66849bb9232a6a6a86eb3304e0dd3c3f",
    "csv/text/none": "5ef898f09deaa9e46b053e0cec5279eca67265346f99b3b27ea4c3d70d52aec9",
    "csv/text/gzip": "33c7c28f051ead8cdcdce8ce6360c279fc749a44abc952100ee54889cf784f31",
    "csv/text/zstd": "5ac61b94020c9a33a84993e9e7ae646e5db39f002ba919d49341bc673b1c2469",
    "csv/bytes/none": "b3aba3b7d4bd179d409bc16680bf6ab5afb371494e8b75a7bcb431c68f44a40e",
    "csv/bytes/gzip": "6efce6bbc8bc98e9453eddc6d1a2c7651c785c0373e044813e036805ed56a60d",
    "csv/bytes/zstd": "ab6de52c7ef63f326a6ef3201175cbed22ba44ed8f506e9c4930f99a621e4bc5",
}
PINNED_DIGEST = "a6c42e314a8c81bc01d55ea7cc45ad8b26cd0c9a62336f9dd8e7209659596c0c"
PINNED_SET_DIGESTS = {
    "many": (
        "fd0a4d1f922fa8081d3685fbfa4a1b678c556ce191dc42ec9f233d1553925d0f",
        "e2cd548894d0feabaf2d718198af60bfac5c1ba414a5ce571e976f08233b3185",
    ),
    "clean": (
        "15ec2f6ae513cd9cf9b06fa63d96c1a93856641cb7965673d71e950b446b63cd",
        "d92076af761f55b2228bf339231a15901b8b31d9620321bb22ce4cfaabdd3794",
    ),
    "mixed": (
        "1f83fef3b0072c1ee87b35d33f30317e2c99855e3cb28b0f6139215beb38066c",
        "75b2e1f71c9da537f73571bf943de66c45ee64169983e9d05f89b891682d8f9b",
    ),
}
PINNED_LARGE_DIGEST = "8cb4a3c3a8ba75f993d225a670930b4b315410d1dafdeadbb74fb5b46f5d58e4"


def test_the_content_digest_of_fixed_frames_is_what_it_always_was() -> None:
    assert digest_of(ALL_FRAMES) == PINNED_DIGEST


@pytest.mark.parametrize("name", SETS)
def test_the_content_digest_of_many_frames_is_what_it_always_was(name: str) -> None:
    kafka, kinesis = SETS[name]
    assert (digest_of(kafka), digest_of(kinesis)) == PINNED_SET_DIGESTS[name]


def test_the_content_digest_of_large_values_is_what_it_always_was() -> None:
    assert digest_of(LARGE) == PINNED_LARGE_DIGEST


def test_the_content_digest_is_fed_frame_by_frame() -> None:
    digest = ContentDigest()
    for frame in ALL_FRAMES:
        digest.update(frame)
    assert digest.hexdigest() == PINNED_DIGEST


@pytest.mark.parametrize(("name", "body"), list(cases()), ids=[name for name, _ in cases()])
def test_every_line_format_renders_the_bytes_it_always_did(name: str, body: Callable[[], bytes]) -> None:
    assert hashlib.sha256(body()).hexdigest() == PINNED[name]


@pytest.mark.parametrize("encoding", list(CONTEXTS))
def test_a_kafka_bytes_object_without_nulls_is_version_1_bytes_under_version_3(encoding: str) -> None:
    """Version 3 (Kafka's, for tombstones) only makes two lengths signed: without a null, its
    records are version 1's byte for byte, and only the version field differs."""
    kafka = _render("bytes", "none", frames_for(encoding), CONTEXTS[encoding])()
    queue = _render("bytes", "none", frames_for(encoding), replace(CONTEXTS[encoding], source=RABBITMQ))()
    assert kafka[4:6] == b"\x00\x03" and queue[4:6] == b"\x00\x01"
    assert kafka[:4] + b"\x00\x01" + kafka[6:] == queue


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("level", [1, 3, 6])
def test_compressed_bytes_do_not_depend_on_how_the_input_is_split_into_writes(codec: str, level: int) -> None:
    """What lets a format chunk its output as it likes (by record count, by bytes): zlib and
    zstd streams buffer internally, so only the input and the level decide the bytes."""
    data = b"".join(render_plain(MIXED))
    bodies = set()
    for sizes in ([len(data)], [7], [512 * 1024], [3, 65_536, 1 << 20], [131_072 * 3 + 5]):
        out = io.BytesIO()
        with compressed(out, codec, gzip_level=level, zstd_level=level) as sink:
            position, index = 0, 0
            while position < len(data):
                size = sizes[index % len(sizes)]
                sink.write(data[position : position + size])
                position, index = position + size, index + 1
        bodies.add(out.getvalue())
    assert len(bodies) == 1


def render_plain(frames: list[Frame]) -> list[bytes]:
    return [_render("jsonl", "none", frames, RenderContext("orders", 3))()] * 8


def test_the_digest_passes_every_frame_through_in_order() -> None:
    frames = MANY + MANY_KINESIS + LARGE
    digest = ContentDigest()
    assert list(digest.wrap(iter(frames))) == frames
    assert digest.records == len(frames)


# -- the zstd level travels in the render spec -------------------------------------------------

#: specs as ledgers written before the zstd level was configurable hold them
OLD_SPECS = [
    "jsonl|zstd|6|orders|text|json|text",
    "jsonl|gzip|6|orders|text|json|text",
    "parquet|zstd|6|orders|text|json|text|id:long,name:string?|",
    "csv|zstd|9|clicks|bytes|json|text||offset,value.a.b",
    "jsonl|zstd|6|orders|text|json|text|||kinesis",
    "avro|zstandard|6|orders|text|json|text",
]


@pytest.mark.parametrize("encoded", OLD_SPECS)
def test_a_spec_staged_before_the_level_existed_renders_at_level_3_and_encodes_as_it_did(encoded: str) -> None:
    spec = RenderSpec.decode(encoded)
    assert spec.zstd_level == ZSTD_LEVEL == 3
    assert spec.encode() == encoded  # the buffer's spec still matches a config that says the same
    assert getattr(format_of(spec), "zstd_level", None) == 3


def test_a_spec_keeps_its_zstd_level_only_with_a_zstd_codec() -> None:
    spec = RenderSpec("jsonl", "zstd", 6, "orders", "text", "json", "text", zstd_level=1)
    assert spec.encode() == "jsonl|zstd|6|orders|text|json|text|||kafka|1"
    assert RenderSpec.decode(spec.encode()) == spec
    kinesis = replace(spec, source=KINESIS, columns="offset", zstd_level=19)
    assert RenderSpec.decode(kinesis.encode()) == kinesis
    assert kinesis.encode().endswith("||offset|kinesis|19")
    gzip = replace(spec, compression="gzip")  # the level means nothing there: encoded as before
    assert (gzip.zstd_level, gzip.encode()) == (3, "jsonl|gzip|6|orders|text|json|text")
    assert replace(spec, zstd_level=3).encode() == "jsonl|zstd|6|orders|text|json|text"
    avro = RenderSpec("avro", "zstandard", 6, "orders", "text", "json", "text", zstd_level=1)
    assert RenderSpec.decode(avro.encode()).zstd_level == 1


def test_the_level_of_the_spec_is_the_level_rendered() -> None:
    context = RenderContext("orders", 3)
    old = RenderSpec.decode("jsonl|zstd|6|orders|text|json|text")
    new = replace(old, zstd_level=1)
    bodies = {}
    for spec in (old, new):
        out = io.BytesIO()
        format_of(spec).write(iter(CLEAN), context, out)
        bodies[spec.zstd_level] = out.getvalue()
    assert hashlib.sha256(bodies[3]).hexdigest() == PINNED["jsonl/clean/kafka/text/json/zstd"]
    assert bodies[1] != bodies[3]
    assert decompress(bodies[1], "zstd") == decompress(bodies[3], "zstd")


def test_a_config_renders_at_its_zstd_level_and_a_gzip_config_spec_is_unchanged() -> None:
    data = example_config_data()
    config = parse_config(data).streams[0]
    assert RenderSpec.decode(render_spec(config)).zstd_level == 1  # the default
    data["streams"][0]["format"] = {"type": "jsonl", "compression": "gzip"}
    assert render_spec(parse_config(data).streams[0]) == "jsonl|gzip|6|orders|text|json|text"
    data["streams"][0]["format"] = {"type": "parquet", "compression": "zstd", "zstd_level": 7}
    assert RenderSpec.decode(render_spec(parse_config(data).streams[0])).zstd_level == 7
