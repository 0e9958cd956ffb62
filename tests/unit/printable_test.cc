// What the client prints of the daemon's messages on the caller's terminal (issue 24,
// finding 6): a name the role gave a directory must not reach it as escape sequences.

#include "common/printable.h"

#include <gtest/gtest.h>

namespace pando {
namespace {

TEST(Printable, PlainTextAndOtherScriptsPassUnchanged) {
  EXPECT_EQ(printable("project /home/me/p: ok"), "project /home/me/p: ok");
  EXPECT_EQ(printable("r\xc3\xa9sum\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82"),
            "r\xc3\xa9sum\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82");
}

TEST(Printable, TerminalControlSequencesAreEscaped) {
  // What a reviewer named a directory: set the window title, then turn the text red.
  EXPECT_EQ(printable("x/\x1b]0;owned\x07\x1b[31m/.git"), "x/\\x1b]0;owned\\x07\\x1b[31m/.git");
  EXPECT_EQ(printable("a\nb\rc\td\x7f"), "a\\nb\\rc\\td\\x7f");
  EXPECT_EQ(printable(std::string("nul\0byte", 8)), "nul\\x00byte");
  // C1 controls written in UTF-8 (U+009B is a one-character CSI for some terminals).
  EXPECT_EQ(printable("\xc2\x9b"
                      "31m"),
            "\\u009b31m");
  EXPECT_EQ(printable("\xc2\x85"), "\\u0085");
}

TEST(Printable, BytesThatAreNotUtf8AreEscapedAndTheBackslashToo) {
  EXPECT_EQ(printable("\x9b"
                      "31m"),
            "\\x9b31m");                                             // a raw 8-bit CSI
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // an overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xe6\x97"), "\\xe6\\x97");                    // cut short
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(printable("a\\x1b"), "a\\\\x1b");  // a literal backslash stays unambiguous
}

}  // namespace
}  // namespace pando
