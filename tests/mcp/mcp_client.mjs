// A real MCP client (the official SDK, pinned by tests/mcp/package-lock.json) driving the
// example filesystem server through `pando-helper security launch`. Run by
// tests/integration/mcp_server_test.cc as the unprivileged caller:
//   node mcp_client.mjs <pando-helper> <socket> <role> <project> <outside file> <mode>
// mode "workspace": list tools, write a file in the project, read it back, be refused the
//   outside file (the server's own allowed-directories check).
// mode "core": the same server in the read-only role: the write is refused.
// mode "roots": the client offers "/" as its MCP root, so the server's own check allows
//   everything; the outside file must still be out of reach (the sandbox's view).
// One line per step, "ok <step> ..." or "FAIL <step> ..."; exits 1 on any unexpected result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [helper, socket, role, project, outside, mode] = process.argv.slice(2);
if (!["workspace", "core", "roots"].includes(mode)) {
  console.error("usage: mcp_client.mjs <pando-helper> <socket> <role> <project> <outside> <mode>");
  process.exit(2);
}
const written = `${project}/mcp-written.txt`;
const content = `written through pando-helper by the MCP SDK (${mode})\n`;
let failed = false;

function report(ok, step, detail) {
  const line = `${ok ? "ok" : "FAIL"} ${step} ${detail}`.replace(/\s+/g, " ").trim();
  console.log(line);
  if (!ok) failed = true;
}

function text(result) {
  return (result.content ?? []).map((part) => part.text ?? "").join("\n");
}

// A tool call's outcome: the server answers a refusal as a result with isError, the SDK turns a
// protocol-level one into an exception; both count as refused.
async function call(client, name, args) {
  try {
    const result = await client.callTool({ name, arguments: args });
    return { refused: result.isError === true, text: text(result) };
  } catch (error) {
    return { refused: true, text: String(error?.message ?? error) };
  }
}

const capabilities = mode === "roots" ? { roots: { listChanged: false } } : {};
const client = new Client({ name: "pando-helper-test", version: "1.0.0" }, { capabilities });
if (mode === "roots") {
  client.setRequestHandler(ListRootsRequestSchema, async () => ({
    roots: [{ uri: "file:///", name: "everything" }],
  }));
}
const transport = new StdioClientTransport({
  command: helper,
  args: ["security", "launch", "--role", role, "--project-root", project, "--stdio",
         "--socket", socket],
  stderr: "inherit",
});

try {
  await client.connect(transport);
  const server = client.getServerVersion();
  report(true, "connect", `${server?.name} ${server?.version}`);

  const tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
  const wanted = ["list_allowed_directories", "read_text_file", "write_file"];
  report(wanted.every((name) => tools.includes(name)), "tools", tools.join(","));

  if (mode === "roots") {
    // The server asks for the roots right after initialization; wait until it has them.
    let allowed = "";
    for (let i = 0; i < 100 && !/^\/$/m.test(allowed); ++i) {
      allowed = (await call(client, "list_allowed_directories", {})).text;
      if (!/^\/$/m.test(allowed)) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    report(/^\/$/m.test(allowed), "roots", allowed);
  } else {
    const write = await call(client, "write_file", { path: written, content });
    report(write.refused === (mode === "core"), mode === "core" ? "write-refused" : "write",
           write.text);
    if (mode === "workspace") {
      const read = await call(client, "read_text_file", { path: written });
      report(!read.refused && read.text === content, "read", JSON.stringify(read.text));
    }
  }

  const escape = await call(client, "read_text_file", { path: outside });
  report(escape.refused, "outside-refused", escape.text);
} catch (error) {
  report(false, "session", String(error?.stack ?? error));
} finally {
  await client.close().catch(() => {});
}
process.exit(failed ? 1 : 0);
